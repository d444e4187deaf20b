"""Per-instance connect strings and python-oracledb pools for Oracle RAC.

Per seed 000, each node pool connects with INSTANCE_NAME set, so the listener
cannot load-balance the pool away from its instance. The strings are built by
the core (`racaffinity_connect_string`), which validates every value: one that
could break the descriptor syntax is an `InvalidArgumentError`.

`create_node_pools` needs python-oracledb (`pip install racaffinity[oracle]`);
the DSN builders do not.
"""

from __future__ import annotations

import enum
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from ._args import cstr, port_arg
from ._cluster import Cluster, read_text
from ._errors import ConfigError
from ._lib import lib

__all__ = [
    "ConnectForm",
    "address_connect_string",
    "connect_string",
    "descriptor",
    "easy_connect",
    "jdbc_descriptor_url",
    "jdbc_easy_connect_url",
    "node_dsns",
    "create_node_pools",
    "DEFAULT_PORT",
]

DEFAULT_PORT = 1521


class ConnectForm(enum.IntEnum):
    """`racaffinity_connect_form`."""

    DESCRIPTOR = int(lib.RACAFFINITY_CONNECT_FORM_DESCRIPTOR)
    EASY_CONNECT = int(lib.RACAFFINITY_CONNECT_FORM_EASY_CONNECT)
    JDBC_DESCRIPTOR = int(lib.RACAFFINITY_CONNECT_FORM_JDBC_DESCRIPTOR)
    JDBC_EASY_CONNECT = int(lib.RACAFFINITY_CONNECT_FORM_JDBC_EASY_CONNECT)


def address_connect_string(
    form: ConnectForm, address: str, service: str, instance: str, *, default_port: int = 1521
) -> str:
    """Like `connect_string`, from a listener address as written in
    `node.<N>.address` (`host`, `host:port`, `[v6]:port`); the core splits it."""
    port_arg(default_port, "default_port")
    a, s, i = cstr(address, "address"), cstr(service, "service"), cstr(instance, "instance")
    return read_text(lambda buf, cap, n: lib.racaffinity_address_connect_string(int(form), a, default_port, s, i, buf, cap, n))


def connect_string(form: ConnectForm, host: str, port: int, service: str, instance: str) -> str:
    """Builds one per-instance connect string through the core."""
    port_arg(port, "port")
    h, s, i = cstr(host, "host"), cstr(service, "service"), cstr(instance, "instance")
    return read_text(lambda buf, cap, n: lib.racaffinity_connect_string(int(form), h, port, s, i, buf, cap, n))


def descriptor(host: str, port: int, service: str, instance: str) -> str:
    """`(DESCRIPTION=(ADDRESS_LIST=(ADDRESS=(PROTOCOL=tcp)(HOST=…)(PORT=…)))(CONNECT_DATA=(SERVICE_NAME=…)(INSTANCE_NAME=…)))`"""
    return connect_string(ConnectForm.DESCRIPTOR, host, port, service, instance)


def easy_connect(host: str, port: int, service: str, instance: str) -> str:
    """`host:port/service/instance` (an IPv6 host in brackets)."""
    return connect_string(ConnectForm.EASY_CONNECT, host, port, service, instance)


def jdbc_descriptor_url(host: str, port: int, service: str, instance: str) -> str:
    return connect_string(ConnectForm.JDBC_DESCRIPTOR, host, port, service, instance)


def jdbc_easy_connect_url(host: str, port: int, service: str, instance: str) -> str:
    return connect_string(ConnectForm.JDBC_EASY_CONNECT, host, port, service, instance)


Address = Union[str, Tuple[str, int]]

# The forms `node_dsns` builds: python-oracledb DSNs, not JDBC URLs.
_DSN_FORMS = {"descriptor": ConnectForm.DESCRIPTOR, "easy_connect": ConnectForm.EASY_CONNECT}


def node_dsns(
    cluster: Cluster,
    service: str,
    *,
    addresses: Optional[Mapping[str, Address]] = None,
    form: Union[ConnectForm, str] = ConnectForm.DESCRIPTOR,
    default_port: int = DEFAULT_PORT,
) -> Dict[str, str]:
    """Node name -> per-instance DSN for every live node of `cluster`.

    A node's listener address is `addresses[name]` (`"host:port"`, `"host"`
    or `(host, port)`), else its `node.<NAME>.address` config entry. The
    instance name is the node name. `form` is `"descriptor"` (default: what
    python-oracledb's `dsn=` takes in every mode) or `"easy_connect"` (or
    the `ConnectForm` of either); the JDBC forms are refused, since a
    `jdbc:oracle:thin:@` URL is no python-oracledb DSN (build those with
    `jdbc_descriptor_url` and `jdbc_easy_connect_url`)."""
    chosen = _DSN_FORMS.get(form.lower()) if isinstance(form, str) else form
    if chosen is None or chosen not in _DSN_FORMS.values():
        raise ValueError(f"form must be 'descriptor' or 'easy_connect', not {form!r}")
    given = {k.upper(): v for k, v in (addresses or {}).items()}
    out: Dict[str, str] = {}
    for node in cluster.nodes:
        addr = given.get(node.name.upper())
        if addr is None:
            addr = cluster.node_address(node.id)
        if addr is None:
            raise ConfigError(
                f"node `{node.name}` has no address: set node.{node.name}.address in the config "
                f"or pass addresses={{'{node.name}': 'host:port'}}",
                7,
            )
        if isinstance(addr, tuple):
            host, port = addr
            out[node.name] = connect_string(chosen, host, port, service, node.name)
        else:
            out[node.name] = address_connect_string(chosen, addr, service, node.name, default_port=default_port)
    return out


def create_node_pools(
    cluster: Cluster,
    service: str,
    user: str,
    password: str,
    *,
    addresses: Optional[Mapping[str, Address]] = None,
    default_port: int = DEFAULT_PORT,
    **pool_kwargs: Any,
) -> Dict[int, Any]:
    """One `oracledb.create_pool()` per live node, keyed by node id, each
    with that instance's INSTANCE_NAME descriptor as `dsn`. `pool_kwargs`
    (min, max, increment, …) go to every pool. Route with the cluster
    (`cluster.pick()`, `tx_begin`, …) and take connections from
    `pools[route.node]`."""
    try:
        import oracledb  # type: ignore[import-not-found,unused-ignore]
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("create_node_pools needs python-oracledb: pip install 'racaffinity[oracle]'") from e
    dsns = node_dsns(cluster, service, addresses=addresses, default_port=default_port)
    pools: Dict[int, Any] = {}
    try:
        for name, dsn in dsns.items():
            pools[cluster.node_id(name)] = oracledb.create_pool(user=user, password=password, dsn=dsn, **pool_kwargs)
    except BaseException:
        for p in pools.values():
            try:
                p.close(force=True)
            except Exception:
                pass
        raise
    return pools
