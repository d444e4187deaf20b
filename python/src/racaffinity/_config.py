"""Config TEXT from keyword arguments, and a reader of a few values back.

The core parses and validates every config (`racaffinity_cluster_new`); this
module only writes `key = value` lines. It refuses values that could inject
another entry (`;`, newlines) so that a keyword value can never become a
different key.

Nothing is read back from the text: values the bindings need (heartbeat
settings, node addresses) come from the core, which parsed them.
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from ._errors import ConfigError

# keyword -> (config key, kind)
KEYWORDS: Dict[str, Tuple[str, str]] = {
    "name": ("name", "str"),
    "database": ("database", "str"),
    "service": ("service", "str"),
    "nodes": ("nodes", "names"),
    "policy": ("policy", "str"),
    "panic": ("panic", "str"),
    "thread_strict": ("thread.strict", "bool"),
    "thread_auto_pin": ("thread.auto_pin", "bool"),
    "transaction_strict": ("transaction.strict", "bool"),
    "transaction_placement": ("transaction.placement", "str"),
    "transaction_settle": ("transaction.settle", "duration"),
    "session_strict": ("session.strict", "bool"),
    "session_placement": ("session.placement", "str"),
    "session_mode": ("session.mode", "str"),
    "session_idle_ttl": ("session.idle_ttl", "duration"),
    "data_strict": ("data.strict", "bool"),
    "data_placement": ("data.placement", "str"),
    "data_partitions": ("data.partitions", "int"),
    "health_eject_after_failures": ("health.eject_after_failures", "int"),
    "health_eject_backoff": ("health.eject_backoff", "duration"),
    "health_eject_backoff_max": ("health.eject_backoff_max", "duration"),
    "heartbeat_interval": ("heartbeat.interval", "duration"),
    "heartbeat_misses": ("heartbeat.misses", "int"),
    "recovery_scope": ("recovery.scope", "str"),
    "local_machine": ("local.machine", "str"),
    "local_zone": ("local.zone", "str"),
    "locality_spill_percent": ("locality.spill_percent", "int"),
    "topology_feed": ("topology.feed", "str"),
    "topology_feed_timeout": ("topology.feed_timeout", "duration"),
    # mappings
    "node_addresses": ("node.{}.address", "map_str"),
    "node_weights": ("node.{}.weight", "map_int"),
    "node_machines": ("node.{}.machine", "map_str"),
    "node_zones": ("node.{}.zone", "map_str"),
    "data_partition_map": ("data.partition.{}", "partition_map"),
}

_FORBIDDEN = re.compile(r"[;\r\n\x00]")


def _text(kw: str, v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"{kw}: expected str, got {type(v).__name__}")
    if _FORBIDDEN.search(v):
        raise ConfigError(f"`{kw}`: value must not contain ';', a newline or NUL")
    return v.strip()


def _int(kw: str, v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{kw}: expected int, got {type(v).__name__}")
    return str(v)


def _bool(kw: str, v: Any) -> str:
    if not isinstance(v, bool):
        raise TypeError(f"{kw}: expected bool, got {type(v).__name__}")
    return "true" if v else "false"


def duration_text(kw: str, v: Any) -> str:
    """Seconds (int or float), a timedelta, or the config's own text (`200ms`)."""
    if isinstance(v, str):
        return _text(kw, v)
    if isinstance(v, datetime.timedelta):
        seconds = v.total_seconds()
    elif isinstance(v, int) and not isinstance(v, bool):
        # float() of an int past its range raises OverflowError, and str()
        # of a huge one ValueError: a bad value is a ConfigError. Below 2**53
        # the conversion is exact, and far past any duration the core takes.
        if abs(v) >= 1 << 53:
            raise ConfigError(f"`{kw}`: a {v.bit_length()}-bit number of seconds is out of range")
        seconds = float(v)
    elif isinstance(v, float):
        seconds = v
    else:
        raise TypeError(f"{kw}: expected seconds (int/float), a timedelta or a string like '200ms', "
                        f"got {type(v).__name__}")
    ms = seconds * 1000.0
    # Infinity first: round() of it raises OverflowError, not a config error.
    if not (0 <= ms < math.inf) or abs(ms - round(ms)) > 1e-6:
        raise ConfigError(f"`{kw}`: {v!r} is not a whole number of milliseconds")
    return f"{int(round(ms))}ms"


def _name(kw: str, v: Any) -> str:
    s = _text(kw, v)
    if "=" in s or "," in s:
        raise ConfigError(f"`{kw}`: node name {s!r} must not contain '=' or ','")
    return s


def build(config: Optional[str], kwargs: Mapping[str, Any]) -> str:
    """Config text: `config` (if any) followed by one line per keyword."""
    lines: List[str] = []
    if config is not None:
        lines.append(config)
    for kw, value in kwargs.items():
        if kw not in KEYWORDS:
            raise TypeError(f"Cluster() got an unexpected keyword argument {kw!r}")
        if value is None:
            continue
        key, kind = KEYWORDS[kw]
        if kind == "str":
            lines.append(f"{key} = {_text(kw, value)}")
        elif kind == "bool":
            lines.append(f"{key} = {_bool(kw, value)}")
        elif kind == "int":
            lines.append(f"{key} = {_int(kw, value)}")
        elif kind == "duration":
            lines.append(f"{key} = {duration_text(kw, value)}")
        elif kind == "names":
            if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
                raise TypeError(f"{kw}: expected a sequence of node names, got {type(value).__name__}")
            lines.append(f"{key} = " + ", ".join(_name(kw, n) for n in value))
        elif kind in ("map_str", "map_int", "partition_map"):
            if not isinstance(value, Mapping):
                raise TypeError(f"{kw}: expected a mapping, got {type(value).__name__}")
            for k, v in value.items():
                if kind == "partition_map":
                    lines.append(f"{key.format(_int(kw, k))} = {_name(kw, v)}")
                else:
                    val = _text(kw, v) if kind == "map_str" else _int(kw, v)
                    lines.append(f"{key.format(_name(kw, k))} = {val}")
    return "\n".join(lines)
