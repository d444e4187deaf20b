"""Node state changes that a poller of node states missed: a node that went
Down (or Draining) and Up again between two of its reads shows Up to both,
and only the core's per-node `state_changes` count moved. The pools' upkeep
and the SQLAlchemy engine's failover watch read it each round."""

from __future__ import annotations

import logging
from typing import Any, Dict, List

log = logging.getLogger("racaffinity.pools")


class StateChanges:
    """The core's per-node state change counts as last read. Read them
    after the node states a round acts on: a change in between is then
    seen by the next round's states, never taken for a missed one."""

    __slots__ = ("_epoch", "_counts")

    def __init__(self, cluster: Any) -> None:
        self._epoch: Any = None
        self._counts: Dict[int, int] = {}
        self.moved(cluster)

    def moved(self, cluster: Any) -> List[int]:
        """The nodes whose count moved since the last read. The counts are
        read only when the cluster's epoch moved (its metrics are rendered
        to be read): every state change moves it. The epoch is read first,
        so a change during the read moves it again for the next one."""
        epoch = cluster._page[0]
        if epoch == self._epoch:
            return []
        self._epoch = epoch
        try:
            counts = {cluster.node_id(n["name"]): n["state_changes"] for n in cluster.metrics()["nodes"]}
        except Exception as e:  # a node removed meanwhile, a closing cluster: the next round reads again
            self._epoch = None
            log.debug("racaffinity: reading the nodes' state changes failed: %s", e)
            return []
        last, self._counts = self._counts, counts
        return [node for node, n in counts.items() if node in last and n != last[node]]
