"""Prints what Python's OpenTelemetry Prometheus exporter serves for racaffinity's
metrics (OpenMetrics text, which carries # TYPE and # UNIT), after the same traffic
as the Java side of MetricNamesTest: connections borrowed and returned on every
node pool, two held on one pool and a third that times out. Ports of the nodes: argv[1:]."""

import sys

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import REGISTRY
from prometheus_client.openmetrics.exposition import generate_latest
import psycopg_pool

import racaffinity as ra
from racaffinity.otel import instrument
from racaffinity.pools import NodePools

ports = sys.argv[1:]
names = [f"N{i + 1}" for i in range(len(ports))]
dsns = {n: f"host=127.0.0.1 port={p} dbname=postgres user=postgres" for n, p in zip(names, ports)}
provider = MeterProvider(metric_readers=[PrometheusMetricReader()])
# A topology feed no etcd answers, as MetricNamesTest.FEED: the feed's instruments exist.
feed = "topology.feed = etcd://127.0.0.1:1/names"
with ra.Cluster(f"name = names\nnodes = {', '.join(names)}\npolicy = round_robin\n{feed}") as cluster, \
        NodePools(cluster, dsns, min_size=1, max_size=2, timeout=5.0) as pools:
    handle = instrument(pools, meter_provider=provider)
    for _ in range(2 * len(names)):
        with pools.connection() as conn:
            conn.execute("SELECT 1")
    pool = next(iter(dict(pools.items()).values()))
    held = [pool.getconn(), pool.getconn()]
    try:
        pool.getconn(timeout=0.25)
        raise SystemExit("a pool of 2 with both connections held gave a third")
    except psycopg_pool.PoolTimeout:
        pass
    for conn in held:
        pool.putconn(conn)
    sys.stdout.write(generate_latest(REGISTRY).decode())
    handle.uninstrument()
provider.shutdown()
