"""The core's counters are u64 and a host adds any count in one call
(`racaffinity_cluster_count_host_hits`, which the context pins call with the
hits they served from their caches): what Python reads of a counter past
2**63 - 1, through `Cluster.metrics()`, the Prometheus text and
`racaffinity.otel`, against the 3 local PostgreSQL nodes."""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import racaffinity as ra
from racaffinity._lib import lib
from racaffinity.otel import instrument
from racaffinity.pools import NodePools

I64_MAX = (1 << 63) - 1
U64_MAX = (1 << 64) - 1


def count_host_hits(cluster: ra.Cluster, node: int, n: int) -> None:
    assert lib.racaffinity_cluster_count_host_hits(cluster._h, node, n) == 0


def test_metrics_and_prometheus_carry_the_exact_u64() -> None:
    with ra.Cluster("name = big\nnodes = RAC1, RAC2") as cluster:
        count_host_hits(cluster, 0, U64_MAX)
        m = cluster.metrics()
        node = next(n for n in m["nodes"] if n["name"] == "RAC1")
        assert node["affinity_hits"] == U64_MAX
        assert m["scopes"]["thread"]["hits"] == U64_MAX
        text = cluster.metrics_prometheus()
        assert f'racaffinity_node_affinity_hits_total{{cluster="big",node="RAC1"}} {U64_MAX}' in text, text


def test_otel_points_stay_in_int64(pg) -> None:
    cluster = ra.Cluster("name = otel-big\nnodes = RAC1, RAC2, RAC3")
    pools = NodePools(cluster, pg.dsn, min_size=0, max_size=1, timeout=5.0)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    handle = instrument(pools, meter_provider=provider)
    try:
        count_host_hits(cluster, 0, U64_MAX)
        data = reader.get_metrics_data()
        values = {}
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    for p in metric.data.data_points:
                        if hasattr(p, "value"):
                            values[(metric.name, tuple(sorted(p.attributes.items())))] = p.value
        hits = [v for (name, attrs), v in values.items()
                if name == "racaffinity.node.affinity_hits" and ("racaffinity.node", "RAC1") in attrs]
        assert hits, sorted(values)
        too_big = {k: v for k, v in values.items() if isinstance(v, int) and not -(1 << 63) <= v <= I64_MAX}
        assert not too_big, too_big
        assert hits == [I64_MAX]
    finally:
        handle.uninstrument()
        provider.shutdown()
        pools.close()
        cluster.close()
