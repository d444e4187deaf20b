"""Node pools over psycopg 3: one `psycopg_pool` pool per node.

    pools = NodePools(cluster, {"RAC1": dsn1, "RAC2": dsn2, "RAC3": dsn3})
    with pools.connection() as conn:                 # the context's pin, else balanced
        ...
    with pools.connection(key=4711) as conn: ...     # data affinity
    with pools.connection(session=sid) as conn: ...  # web-session affinity
    with cluster.transaction("gtrid-42"):            # every branch, every thread: one node
        with pools.connection() as conn: ...

Routing is the core's. The pools add:
- health feedback: every connection is a lease; a node failure (see
  `racaffinity._failures`: a lost, refused or timed-out connection, or a pool
  that cannot connect to its node) releases it FAILED, once, which feeds
  passive ejection, and is re-raised; application errors release NEUTRAL;
- an optional heartbeat (a daemon thread, or an asyncio task for
  `AsyncNodePools`) that probes every node with `SELECT 1` each
  `heartbeat_interval` and reports the result (`racaffinity_probe_report`);
- two-phase commit over psycopg's `tpc_*` API and recovery
  (`global_transaction`, `recover_all`; see `racaffinity.tpc`).

`AsyncNodePools` is the asyncio version (`async with`, same arguments).
Both come from one source, `_pools_async.py`; `_pools_sync.py` is generated
from it by `tools/async_to_sync.py`.

Needs `pip install racaffinity[postgres]` (psycopg 3 and psycopg_pool).
Connection strings and credentials are never shown in `repr`, logs or the
exceptions this module raises.
"""

from __future__ import annotations

from ._extras import require

require(__name__, "postgres", "psycopg", "psycopg_pool")

from ._failures import is_node_failure  # noqa: E402 - after the check that names the extra
from ._pools_async import AsyncNodePools
from ._pools_sync import NodePools

__all__ = ["NodePools", "AsyncNodePools", "is_node_failure"]
