#!/usr/bin/env python3
"""Reference side of the `hrw_differential` fuzz target.

Reads one JSON request per line on stdin and answers one JSON line on stdout,
computed ONLY with the independent racaffinity-hrw-v2 implementation in
tests/vectors/generate.py (written from the documentation, not from the Rust
code). The fuzz target sends the same random inputs to the Rust core and
compares. Request:
  {"nodes": [[name, weight], ...], "partitions": P,
   "keys": [hex, ...], "ints": [i64, ...], "parts": [p, ...],
   "scores": [[key_hash_hex, node_name, weight], ...]}
Answer:
  {"key_hash": [hex], "int_hash": [hex], "seed": [hex per node],
   "key_partition": [int], "key_owner": [name | null],
   "part_owner": [...], "score": [hex], "wscore": [f64 bits hex]}
null means the reference calls the winner Fragile (it depends on the last
bits of ln()), so that comparison is skipped, as the vectors do.
"""

import functools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "vectors"))
import generate as ref  # noqa: E402

# `owner` derives every node's seed and tie-break key again for each key it
# places (up to 12 nodes x 64 keys a request): most of this child's time,
# which was most of the target's. Both are pure functions of the name, so
# memoizing them changes no answer; the reference's code stays as written.
ref.seed = functools.lru_cache(maxsize=1 << 14)(ref.seed)
ref._neg_bytes = functools.lru_cache(maxsize=1 << 14)(ref._neg_bytes)


def owner_or_none(nodes, key_hash):
    try:
        return ref.owner(nodes, key_hash)
    except ref.Fragile:
        return None


def answer(req):
    nodes = [(n, int(w)) for n, w in req["nodes"]]
    parts = int(req["partitions"])
    keys = [bytes.fromhex(k) for k in req["keys"]]
    key_hashes = [ref.h(k) for k in keys]
    int_hashes = [ref.hash_i64(v) for v in req["ints"]]
    out = {
        "key_hash": [ref.hex64(x) for x in key_hashes],
        "int_hash": [ref.hex64(x) for x in int_hashes],
        "seed": [ref.hex64(ref.seed(n)) for n, _ in nodes],
        "key_partition": [x % parts for x in key_hashes],
        "key_owner": [owner_or_none(nodes, x) for x in key_hashes] if nodes else [],
        # Step 5: partition p is placed as the integer key p.
        "part_owner": [owner_or_none(nodes, ref.hash_i64(p)) for p in req["parts"]] if nodes else [],
        "score": [],
        "wscore": [],
    }
    for kh, name, w in req["scores"]:
        s = ref.score(int(kh, 16), ref.seed(name))
        out["score"].append(ref.hex64(s))
        out["wscore"].append(ref.f64_bits(ref.weighted_score(s, float(w))))
    return out


def main():
    for line in sys.stdin:
        sys.stdout.write(json.dumps(answer(json.loads(line))) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
