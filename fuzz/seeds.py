#!/usr/bin/env python3
"""Writes the seed corpora of the text-input fuzz targets from the shared
vectors, so the seeds are the inputs every binding already agrees on:

  corpus/config_parse/   every config text of tests/vectors/config.json
                         (valid and refused), the rendezvous topologies and
                         the README's full key list;
  corpus/event_apply/    every event line of tests/vectors/events.json, one
                         file per line and one per `apply` scenario (its
                         lines in order), for each cluster shape byte.

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


if __name__ == "__main__":
    main()
