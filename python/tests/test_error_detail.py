"""A raised error carries the detail of its own failed call (issue 26
[core-review-3] item 12): the library keeps one last-error message per OS
thread, and a finalizer (a lease or pin dropped on a closed cluster) that
runs between a failed call and the read of its message must not replace it
with its own ("invalid cluster handle"); and an empty node list is refused
where the cluster is built."""

from __future__ import annotations

import pytest

import racaffinity as ra
from racaffinity import _errors

from conftest import NAMES


def _drop_a_lease_of_a_closed_cluster() -> None:
    other = ra.Cluster(nodes=NAMES)
    lease = other.pick()
    other.close()
    del lease  # __del__ releases it NEUTRAL: INVALID_HANDLE inside


def test_a_finalizer_between_a_failed_call_and_its_message_leaves_the_message(cluster, monkeypatch):
    read = _errors.last_error_message
    ran = []

    def finalizer_runs_first() -> str:
        # What the cycle collector may do at any bytecode boundary: once,
        # for the call under test (the finalizer's own raise reads too).
        if not ran:
            ran.append(True)
            _drop_a_lease_of_a_closed_cluster()
        return read()

    monkeypatch.setattr(_errors, "last_error_message", finalizer_runs_first)
    with pytest.raises(ra.UnknownTransactionError) as e:
        cluster.tx_end("no-such-gtrid")
    assert "no-such-gtrid" in str(e.value) or "unknown transaction" in str(e.value), str(e.value)
    assert "handle" not in str(e.value)


@pytest.mark.parametrize("config", [{"nodes": []}, {"config": "nodes = "}])
def test_an_empty_node_list_is_refused_where_the_cluster_is_built(config):
    with pytest.raises(ra.ConfigError) as e:
        if "config" in config:
            ra.Cluster(config["config"])
        else:
            ra.Cluster(**config)
    assert "at least one node" in str(e.value), str(e.value)
