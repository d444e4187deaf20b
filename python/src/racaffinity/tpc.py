"""Two-phase commit over psycopg's `tpc_*` API, routed by the core, and
recovery of in-doubt branches.

    with pools.global_transaction("order-42") as gtx:   # commit on exit, rollback on error
        with gtx.branch() as conn:                      # tx_begin -> node; tpc_begin
            conn.execute("INSERT ...")
        # branch exit: tpc_prepare, then tx_prepared (the transaction never moves)
        with gtx.branch() as conn:                      # another branch: same node, any thread
            conn.execute("UPDATE ...")
    # exit: each branch's tpc_commit on the node it ran on; tx_end

    report = pools.recover_all("rollback")              # after a crash

Over `AsyncNodePools` the same API is awaited (`AsyncGlobalTransaction`):

    async with apools.global_transaction("order-42") as gtx:
        async with gtx.branch() as conn:
            await conn.execute("INSERT ...")
    report = await apools.recover_all("rollback")

The Xid is psycopg's XA triple (format_id, gtrid, bqual): the format id and
the gtrid (its UTF-8 bytes, 1..=64) name the global transaction, which the
core routes by `transaction_key(gtrid, format_id)`; each branch gets its own
bqual. A branch keeps its connection (and its lease) from
`tpc_begin` until phase two, as an XA resource manager connection would.

Failures are told apart, never guessed: a PREPARE or phase-two command
whose answer was lost, or a node that does not answer within `timeout`,
leaves the branch *in doubt*, on record (the core's registry entry, and
`pools.in_doubt`), and raises `InDoubtError`; a PREPARE the server refuses
(a deferred constraint or trigger) is a plain rollback of an unprepared
transaction. A lost phase-two answer is re-checked on a new connection (is
the xid still in `pg_prepared_xacts`?), so a COMMIT PREPARED that took
effect is reported committed.

Recovery (`recover_all`) looks for prepared branches with `tpc_recover()`.
With `recovery.scope = node` (independent databases) it scans every node
on its own thread, records each gtrid with the node that returned it
(`racaffinity_tx_recovered`: a gtrid on two nodes is reported as split) and
commits or rolls back each branch right there; with `recovery.scope =
database` (RAC: instances of one database) one instance's scan lists every
branch, and each is completed through its owner, or any Up instance. Then
it forgets the gtrids (`tx_complete`). The default action is rollback, as a
presumed-abort transaction manager does for branches whose decision it does
not know; pass "commit" when the decision was to commit. Only run it for
transactions whose coordinator is gone (at start-up, or for old ones with
`predicate`): it resolves every matching branch it finds.
"""

from __future__ import annotations

from ._extras import require

require(__name__, "postgres", "psycopg", "psycopg_pool")

# The logic is written once, for asyncio (`_tpc_async`); `_tpc_sync` is
# generated from it by tools/async_to_sync.py.
from ._tpc_async import AsyncGlobalTransaction  # noqa: E402 - after the check that names the extra
from ._tpc_async import recover_all as recover_all_async  # noqa: E402
from ._tpc_sync import GlobalTransaction, recover_all  # noqa: E402
from ._tpc_types import (  # noqa: E402
    DEFAULT_FORMAT_ID,
    Branch,
    InDoubtError,
    Recovered,
    RecoveryReport,
    transaction_key,
)

__all__ = [
    "DEFAULT_FORMAT_ID", "AsyncGlobalTransaction", "GlobalTransaction", "Branch", "InDoubtError",
    "recover_all", "recover_all_async", "RecoveryReport", "Recovered", "transaction_key",
]
