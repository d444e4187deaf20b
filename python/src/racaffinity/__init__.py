"""racaffinity: client-side affinity and load balancing over Oracle RAC
instances (or any clustered database's nodes), on the one native library
libracaffinity.

    import racaffinity

    with racaffinity.Cluster(nodes=["RAC1", "RAC2", "RAC3"]) as cluster:
        with cluster.pin():                      # this thread / asyncio task
            with cluster.pick() as lease:        # same node on every pick
                print(lease.name)
        with cluster.transaction(b"gtrid-42") as tx:
            print(tx.name)                       # every branch: this node

Submodules: `racaffinity.pools` (psycopg_pool pools per node, 2PC helper,
recovery, heartbeat) and `racaffinity.oracle` (per-instance python-oracledb
DSNs and pools).
"""

from ._args import BytesLike, DataKey
from ._cluster import Cluster, version
from ._continuity import (
    CommitOutcome,
    ErrorClass,
    ReplayAction,
    ReplayRefusal,
    ReplayRefused,
    ReplayStep,
    RequestFailure,
    TransactionControl,
    classify_oracle_error,
    classify_sqlstate,
    sets_session_state,
    transaction_control,
)
from ._routes import Lease, Node, NodeState, Outcome, Route, RouteKind, Scope
from ._scopes import PinScope, SessionScope, Transaction
from ._token import SessionRouting, TokenChoice, TokenRoute
from ._errors import (
    EXCEPTIONS,
    BufferTooSmallError,
    ClosedError,
    ConfigError,
    DuplicateNodeError,
    Error,
    EventParseError,
    FeedUnavailableError,
    ForeignEventError,
    InvalidArgumentError,
    InvalidLeaseError,
    InvalidUtf8Error,
    KeyOverflowError,
    NoNodeAvailableError,
    NullArgumentError,
    PanicError,
    PreparedNodeUnavailableError,
    StrictAffinityError,
    TooManyHandlesError,
    UnknownNodeError,
    UnknownTransactionError,
    exception_for,
)
from ._lib import LIBRARY_PATH
from ._ucp import AffinityContext, AffinityPolicy, ConnectionAffinityCallback, ConnectionAffinityContext

__version__ = version()

__all__ = [
    "AffinityContext",
    "AffinityPolicy",
    "ConnectionAffinityCallback",
    "ConnectionAffinityContext",
    "Cluster",
    "Route",
    "Lease",
    "Node",
    "NodeState",
    "RouteKind",
    "Outcome",
    "Scope",
    "PinScope",
    "Transaction",
    "SessionScope",
    "SessionRouting",
    "TokenRoute",
    "TokenChoice",
    "BytesLike",
    "DataKey",
    "version",
    "LIBRARY_PATH",
    "ErrorClass",
    "CommitOutcome",
    "ReplayAction",
    "ReplayRefusal",
    "ReplayRefused",
    "ReplayStep",
    "RequestFailure",
    "classify_sqlstate",
    "transaction_control",
    "sets_session_state",
    "TransactionControl",
    "classify_oracle_error",
    # The exceptions: racaffinity._errors.__all__ (test_api checks both lists agree).
    "Error",
    "NullArgumentError",
    "ClosedError",
    "InvalidArgumentError",
    "InvalidUtf8Error",
    "KeyOverflowError",
    "BufferTooSmallError",
    "PanicError",
    "ConfigError",
    "UnknownNodeError",
    "DuplicateNodeError",
    "NoNodeAvailableError",
    "StrictAffinityError",
    "PreparedNodeUnavailableError",
    "UnknownTransactionError",
    "EventParseError",
    "ForeignEventError",
    "TooManyHandlesError",
    "InvalidLeaseError",
    "FeedUnavailableError",
    "EXCEPTIONS",
    "exception_for",
]
