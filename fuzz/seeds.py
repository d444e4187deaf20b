#!/usr/bin/env python3
"""Writes the seed corpora of the text-input fuzz targets from the shared
vectors, so the seeds are the inputs every binding already agrees on:

  corpus/config_parse/   every config text of tests/vectors/config.json
                         (valid and refused), the rendezvous topologies and
                         the README's full key list;
  corpus/event_apply/    every event line of tests/vectors/events.json, one
                         file per line and one per `apply` scenario (its
                         lines in order), for each cluster shape byte;
  corpus/feed_record/    every documented feed record form, one file per
                         record and one with them all as a log, for each
                         cluster shape byte.

Deterministic; file names are the content's sha1, so re-running adds nothing
twice. The structure-aware targets (capi_sequence, hrw_differential) keep
their own seeds: see docs/fuzzing.md.
"""

import hashlib
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
VECTORS = HERE.parent / "tests" / "vectors"

README_CONFIG = """\
name = orders
database = orcl
service = svc
nodes = MYDB1, MYDB2, MYDB3
node.MYDB1.address = h1:1521
node.MYDB2.address = [::1]:1522
node.MYDB3.weight = 3
policy = weighted
panic = fail
thread.strict = true
thread.auto_pin = false
transaction.strict = true
transaction.placement = balanced
session.strict = false
session.placement = rendezvous
session.mode = registry
session.idle_ttl = 30m
data.strict = false
data.placement = rendezvous
data.partitions = 4096
data.partition.7 = MYDB2
health.eject_after_failures = 5
health.eject_backoff = 1s
health.eject_backoff_max = 60s
heartbeat.interval = 10s
heartbeat.misses = 3
recovery.scope = database
"""


def write(target: str, data: bytes) -> None:
    d = HERE / "corpus" / target
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()).write_bytes(data)


def main() -> None:
    config = json.loads((VECTORS / "config.json").read_text())
    texts = [c["text"] for c in config["parse"]] + [c["text"] for c in config["errors"]]
    texts.append(README_CONFIG)
    texts.append(README_CONFIG.replace("\n", ";"))
    rendezvous = json.loads((VECTORS / "rendezvous.json").read_text())
    texts += [t["config"] for t in rendezvous.get("topologies", []) if "config" in t]
    for t in texts:
        write("config_parse", t.encode())

    events = json.loads((VECTORS / "events.json").read_text())
    lines = [p["line"] for p in events["parse"]] + [p["line"] for p in events["parse_errors"]]
    for shape in (0, 1, 0x80):
        for line in lines:
            write("event_apply", bytes([shape]) + line.encode())
        for scenario in events["apply"]:
            write("event_apply", bytes([shape]) + "\n".join(s["line"] for s in scenario["steps"]).encode())

    # feed_record: the documented record forms (docs/operations.md, "Feed
    # records"), one per seed and as a log, for each cluster shape.
    records = [
        "5 node/D present weight=3 address=db4:5432",
        "6 node/A present address=h9:1521",
        "7 node/B/state draining timeout=30s",
        "8 node/B/state draining timeout=60s since=1795964400",
        "9 node/C/state down",
        "10 node/C/state",
        "11 node/A/weight 7",
        "12 node/A/weight",
        "13 partition_map 0=A,1=B,2=C",
        "14 node/D removed",
        "15 fan/instance-orcl_2 INSTANCE VERSION=1.0 database=orcl instance=orcl_2 host=h2 status=down "
        "reason=FAILURE timestamp=2026-11-29 15:00:00",
        "16 node/orcl_2/state draining timeout=1m since=1795964400",
    ]
    for shape in (0, 1, 2):
        for r in records:
            write("feed_record", bytes([shape]) + r.encode())
        write("feed_record", bytes([shape]) + "\n".join(records).encode())


if __name__ == "__main__":
    main()
