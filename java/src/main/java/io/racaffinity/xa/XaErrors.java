package io.racaffinity.xa;

import io.racaffinity.AffinityException;
import io.racaffinity.ClusterClosedException;
import io.racaffinity.InvalidArgumentException;
import io.racaffinity.NoNodeAvailableException;
import io.racaffinity.PreparedNodeUnavailableException;
import io.racaffinity.StrictAffinityException;
import io.racaffinity.UnknownTransactionException;
import javax.transaction.xa.XAException;

/**
 * Routing refusals of the core as {@link XAException}s. The codes follow what
 * a TM does with them (X/Open XA). Since 2PC commands are never refused for
 * routing reasons (the core's {@code txRoute} names the owner whatever its
 * state), refusals concern {@code start}; an unreachable node answers
 * {@code XAER_RMFAIL} from the call itself:
 *
 * <table>
 *   <caption>mapping</caption>
 *   <tr><th>core error</th><th>operation</th><th>XA code</th><th>the TM then</th></tr>
 *   <tr><td>PreparedNodeUnavailable (a new branch of a prepared gtrid on a Down node)</td><td>start</td>
 *       <td>XAER_RMFAIL</td><td>fails the enlistment; a prepared branch never moves</td></tr>
 *   <tr><td>StrictAffinity (owner unavailable; {@code transaction.strict})</td><td>start</td>
 *       <td>XAER_RMFAIL</td><td>fails the enlistment and rolls the transaction back</td></tr>
 *   <tr><td>NoNodeAvailable, cluster closed</td><td>any</td><td>XAER_RMFAIL</td><td>as above</td></tr>
 *   <tr><td>UnknownTransaction</td><td>any</td><td>XAER_NOTA</td><td>the branch does not exist</td></tr>
 *   <tr><td>InvalidArgument (e.g. empty or &gt; 64-byte gtrid)</td><td>any</td><td>XAER_INVAL</td><td></td></tr>
 *   <tr><td>other</td><td>any</td><td>XAER_RMERR</td><td></td></tr>
 * </table>
 */
final class XaErrors {
    private XaErrors() {}

    static XAException xa(int code, String message, Throwable cause) {
        XAException e = new XAException(message + " [" + name(code) + "]");
        e.errorCode = code;
        if (cause != null) {
            e.initCause(cause);
        }
        return e;
    }

    static XAException routing(AffinityException e, String op, XidKey xid) {
        String msg = "racaffinity: cannot route " + op + (xid == null ? "" : " of xid " + xid) + ": " + e.getMessage();
        int code;
        if (e instanceof PreparedNodeUnavailableException) {
            code = XAException.XAER_RMFAIL;
            msg += " (a prepared branch never moves: retry when its node is back)";
        } else if (e instanceof StrictAffinityException) {
            boolean phaseOne = op.equals("prepare") || op.equals("one-phase commit");
            code = phaseOne ? XAException.XA_RBCOMMFAIL : XAException.XAER_RMFAIL;
            msg += phaseOne ? " (the branch's work was on that node: roll the transaction back)"
                    : " (UseStrictXAAffinity / transaction.strict, or the branch cannot move)";
        } else if (e instanceof NoNodeAvailableException || e instanceof ClusterClosedException) {
            code = XAException.XAER_RMFAIL;
        } else if (e instanceof UnknownTransactionException) {
            code = XAException.XAER_NOTA;
        } else if (e instanceof InvalidArgumentException) {
            code = XAException.XAER_INVAL;
        } else {
            code = XAException.XAER_RMERR;
        }
        return xa(code, msg, e);
    }

    static boolean rolledBack(int code) {
        return code >= XAException.XA_RBBASE && code <= XAException.XA_RBEND;
    }

    static boolean heuristic(int code) {
        return code == XAException.XA_HEURCOM || code == XAException.XA_HEURHAZ || code == XAException.XA_HEURMIX
                || code == XAException.XA_HEURRB;
    }

    static String name(int code) {
        switch (code) {
            case XAException.XA_RBROLLBACK: return "XA_RBROLLBACK";
            case XAException.XA_RBCOMMFAIL: return "XA_RBCOMMFAIL";
            case XAException.XA_RBDEADLOCK: return "XA_RBDEADLOCK";
            case XAException.XA_RBINTEGRITY: return "XA_RBINTEGRITY";
            case XAException.XA_RBOTHER: return "XA_RBOTHER";
            case XAException.XA_RBPROTO: return "XA_RBPROTO";
            case XAException.XA_RBTIMEOUT: return "XA_RBTIMEOUT";
            case XAException.XA_RBTRANSIENT: return "XA_RBTRANSIENT";
            case XAException.XA_HEURHAZ: return "XA_HEURHAZ";
            case XAException.XA_HEURCOM: return "XA_HEURCOM";
            case XAException.XA_HEURRB: return "XA_HEURRB";
            case XAException.XA_HEURMIX: return "XA_HEURMIX";
            case XAException.XA_RETRY: return "XA_RETRY";
            case XAException.XA_RDONLY: return "XA_RDONLY";
            case XAException.XAER_ASYNC: return "XAER_ASYNC";
            case XAException.XAER_RMERR: return "XAER_RMERR";
            case XAException.XAER_NOTA: return "XAER_NOTA";
            case XAException.XAER_INVAL: return "XAER_INVAL";
            case XAException.XAER_PROTO: return "XAER_PROTO";
            case XAException.XAER_RMFAIL: return "XAER_RMFAIL";
            case XAException.XAER_DUPID: return "XAER_DUPID";
            case XAException.XAER_OUTSIDE: return "XAER_OUTSIDE";
            default: return "XA code " + code;
        }
    }
}
