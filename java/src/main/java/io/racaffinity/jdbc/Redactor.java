package io.racaffinity.jdbc;

import io.racaffinity.Redacted;
import java.sql.SQLException;
import java.util.function.UnaryOperator;
import java.util.regex.Pattern;

/**
 * Keeps credentials out of toString(), log lines and exception messages: masks
 * the configured password wherever it appears and the values of
 * password-like URL parameters ({@code password=}, {@code pwd=}, ...).
 */
final class Redactor {
    private static final Pattern URL_SECRET = Pattern.compile(
            "(?i)((?:password|passwd|pwd|secret|credentials?)\\s*=\\s*)([^&;)\\s]*)");
    /** {@code //user:password@host}: the password runs to the authority's last {@code @} (it may hold one). */
    private static final Pattern USERINFO = Pattern.compile("(//)([^/@\\s:]+):([^/\\s]*)@");
    /**
     * Oracle's inline credentials: {@code jdbc:oracle:thin:scott/tiger@//host...} (also oci); a quoted
     * password ({@code scott/"ti@ger"@...}) may hold an {@code @}.
     */
    private static final Pattern ORACLE_INLINE = Pattern.compile(
            "(?i)(jdbc:oracle:[a-z0-9]+:)(\"[^\"]*\"|[^/@\\s:\"]+)/(\"[^\"]*\"|[^@\\s]*)@");

    private final String password;

    Redactor(String password) {
        this.password = password == null || password.isEmpty() ? null : password;
    }

    String redact(String s) {
        if (s == null) {
            return null;
        }
        String r = s;
        if (password != null) {
            r = r.replace(password, "****");
        }
        r = URL_SECRET.matcher(r).replaceAll("$1****");
        r = ORACLE_INLINE.matcher(r).replaceAll("$1$2/****@");
        return USERINFO.matcher(r).replaceAll("$1$2:****@");
    }

    /** This redaction, also masking {@code extra} (a password given to one call). */
    UnaryOperator<String> with(String extra) {
        if (extra == null || extra.isEmpty()) {
            return this::redact;
        }
        return s -> s == null ? null : redact(s).replace(extra, "****");
    }

    /** {@code e}, or a copy whose messages, causes and next exceptions are redacted (SQLState, code kept). */
    SQLException sql(SQLException e, String extraSecret) {
        return Redacted.sql(e, with(extraSecret));
    }
}
