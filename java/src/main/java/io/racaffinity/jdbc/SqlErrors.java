package io.racaffinity.jdbc;

import io.racaffinity.AffinityException;
import io.racaffinity.ClusterClosedException;
import io.racaffinity.InvalidArgumentException;
import io.racaffinity.InvalidConfigException;
import io.racaffinity.NoNodeAvailableException;
import io.racaffinity.PreparedNodeUnavailableException;
import io.racaffinity.StrictAffinityException;
import io.racaffinity.UnknownNodeException;
import java.sql.SQLException;
import java.sql.SQLNonTransientConnectionException;
import java.sql.SQLNonTransientException;
import java.sql.SQLRecoverableException;
import java.sql.SQLTransientConnectionException;
import java.util.List;

/** The JDBC side of errors: which SQLExceptions mean "the node failed", and routing errors as SQLExceptions. */
final class SqlErrors {
    private SqlErrors() {}

    /**
     * SQLState prefixes that mean "the node failed" unless configured otherwise. Not 57P01
     * (admin_shutdown): PostgreSQL sends it to one session for {@code pg_terminate_backend},
     * which is no node failure; when the postmaster dies its backends send it too, and the
     * crash is then counted by the next connection attempt (refused, 08001) or the heartbeat.
     */
    static final List<String> DEFAULT_NODE_FAILURE_STATES = List.of("08", "57P02", "57P03");

    /**
     * Whether {@code e} means the node (or the path to it) failed, as opposed to
     * an error of the statement itself: an SQLState starting with one of
     * {@code prefixes} (by default class {@code 08}, connection exception, plus
     * PostgreSQL's {@code 57P02} and {@code 57P03}, sent when a server crashes or
     * cannot accept connections), or a {@link SQLRecoverableException} (what
     * drivers such as ojdbc throw for a lost connection), anywhere in the chain
     * of causes and next-exceptions, until an exception with a specific other
     * SQLState: the database's own verdict on the statement wins over the I/O
     * errors that follow it.
     */
    static boolean isNodeFailure(SQLException e, List<String> prefixes) {
        if (isAuthenticationFailure(e)) {
            return false; // a pool's timeout can carry the login's 28000 under its own 08xxx
        }
        Throwable t = e;
        for (int depth = 0; t != null && depth < 16; depth++) {
            if (t instanceof SQLException) {
                SQLException s = (SQLException) t;
                if (s instanceof SQLRecoverableException || matches(s.getSQLState(), prefixes)) {
                    return true;
                }
                if (specific(s.getSQLState())) {
                    // The database said what went wrong (a constraint, a trigger, 57P01 for one terminated
                    // session...): that decides. pgjdbc chains the I/O error of the socket the server then
                    // closed (08006) as the next exception; it is a consequence, not a node failure.
                    return false;
                }
                SQLException next = s.getNextException();
                if (next != null && next != t && matches(next.getSQLState(), prefixes)) {
                    return true;
                }
            }
            t = t.getCause() == t ? null : t.getCause();
        }
        return false;
    }

    /**
     * Whether {@code e} is a refused login (SQLState class 28: 28000, 28P01; Oracle's ORA-01017)
     * anywhere in its chain: the node answered, and the credentials are one user's. Never a node
     * failure, in a lease as in a heartbeat probe.
     */
    static boolean isAuthenticationFailure(SQLException e) {
        Throwable t = e;
        for (int depth = 0; t != null && depth < 16; depth++) {
            if (t instanceof SQLException) {
                for (SQLException s = (SQLException) t; s != null; s = s.getNextException() == s ? null
                        : s.getNextException()) {
                    String st = s.getSQLState();
                    String msg = s.getMessage();
                    if ((st != null && st.startsWith("28")) || (msg != null && msg.startsWith("ORA-01017"))) {
                        return true;
                    }
                }
            }
            t = t.getCause() == t ? null : t.getCause();
        }
        return false;
    }

    /** A SQLState that names an error, as opposed to none or a generic one (HY000, S1000, 99999). */
    private static boolean specific(String state) {
        return state != null && state.length() == 5 && !state.equals("HY000") && !state.equals("S1000")
                && !state.equals("99999") && !state.startsWith("01");
    }

    private static boolean matches(String state, List<String> prefixes) {
        if (state == null) {
            return false;
        }
        for (String p : prefixes) {
            if (state.startsWith(p)) {
                return true;
            }
        }
        return false;
    }

    /**
     * A routing error as an SQLException, the original as its cause:
     *
     * <table>
     *   <caption>mapping</caption>
     *   <tr><th>racaffinity</th><th>SQLException</th><th>SQLState</th></tr>
     *   <tr><td>StrictAffinity, PreparedNodeUnavailable, NoNodeAvailable</td>
     *       <td>SQLTransientConnectionException</td><td>08001</td></tr>
     *   <tr><td>ClusterClosed</td><td>SQLNonTransientConnectionException</td><td>08003</td></tr>
     *   <tr><td>InvalidArgument, UnknownNode</td><td>SQLNonTransientException</td><td>22023</td></tr>
     *   <tr><td>InvalidConfig</td><td>SQLNonTransientException</td><td>HY000</td></tr>
     *   <tr><td>other</td><td>SQLException</td><td>HY000</td></tr>
     * </table>
     */
    static SQLException routing(AffinityException e) {
        String msg = "racaffinity: " + e.getMessage();
        if (e instanceof StrictAffinityException
                || e instanceof PreparedNodeUnavailableException
                || e instanceof NoNodeAvailableException) {
            return new SQLTransientConnectionException(msg, "08001", e);
        }
        if (e instanceof ClusterClosedException) {
            return new SQLNonTransientConnectionException(msg, "08003", e);
        }
        if (e instanceof InvalidArgumentException || e instanceof UnknownNodeException) {
            return new SQLNonTransientException(msg, "22023", e);
        }
        if (e instanceof InvalidConfigException) {
            return new SQLNonTransientException(msg, "HY000", e);
        }
        return new SQLException(msg, "HY000", e);
    }
}
