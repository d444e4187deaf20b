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
    /** What names a credential: a URL parameter's name, a node data source property's ({@link #isSecretKey}). */
    private static final String SECRET_WORDS = "password|passwd|pwd|secret|credentials?";
    private static final Pattern URL_SECRET = Pattern.compile(
            "(?i)((?:" + SECRET_WORDS + ")\\s*=\\s*)([^&;)\\s]*)");
    private static final Pattern SECRET_KEY = Pattern.compile("(?i).*(?:" + SECRET_WORDS + ").*");
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

    /**
     * Whether a property of that name holds a credential, by the words a URL parameter does: a node data
     * source's {@code pwd} or {@code clientSecret} is as secret as its {@code password}.
     */
    static boolean isSecretKey(String key) {
        return SECRET_KEY.matcher(key).matches();
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
