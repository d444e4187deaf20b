"""racaffinity.oracle: per-instance DSNs built by the core, and
create_node_pools against a fake `oracledb` module (no Oracle Database or
python-oracledb here)."""

from __future__ import annotations

import sys
import types

import pytest

import racaffinity as ra
from racaffinity import oracle

CONFIG = """
database = orcl
service = sales
nodes = MYDB1, MYDB2, MYDB3
node.MYDB1.address = mydbhost1:1522
node.MYDB2.address = mydbhost2
node.MYDB3.address = [2001:db8::3]:1523
"""


def test_builders_match_the_readme_table():
    a = ("MYDBHOST1", 1522, "MYDB", "MYDB1")
    assert oracle.easy_connect(*a) == "MYDBHOST1:1522/MYDB/MYDB1"
    assert oracle.descriptor(*a) == (
        "(DESCRIPTION=(ADDRESS_LIST=(ADDRESS=(PROTOCOL=tcp)(HOST=MYDBHOST1)(PORT=1522)))"
        "(CONNECT_DATA=(SERVICE_NAME=MYDB)(INSTANCE_NAME=MYDB1)))"
    )
    assert oracle.jdbc_descriptor_url(*a) == "jdbc:oracle:thin:@" + oracle.descriptor(*a)
    assert oracle.jdbc_easy_connect_url(*a) == "jdbc:oracle:thin:@//MYDBHOST1:1522/MYDB/MYDB1"


def test_values_that_break_the_syntax_are_refused():
    with pytest.raises(ra.InvalidArgumentError):
        oracle.descriptor("h", 1521, "S)(SERVER=dedicated", "I1")
    with pytest.raises(ra.InvalidArgumentError):
        oracle.easy_connect("h", 0, "S", "I1")
    with pytest.raises(ra.KeyOverflowError):
        oracle.easy_connect("h", 70000, "S", "I1")


def test_node_dsns_from_config_addresses():
    with ra.Cluster(CONFIG) as c:
        d = oracle.node_dsns(c, "sales", form="easy_connect")
        assert d == {
            "MYDB1": "mydbhost1:1522/sales/MYDB1",
            "MYDB2": "mydbhost2:1521/sales/MYDB2",
            "MYDB3": "[2001:db8::3]:1523/sales/MYDB3",
        }
        desc = oracle.node_dsns(c, "sales")
        assert desc["MYDB2"] == oracle.descriptor("mydbhost2", 1521, "sales", "MYDB2")
        assert "(INSTANCE_NAME=MYDB3)" in desc["MYDB3"] and "(HOST=2001:db8::3)" in desc["MYDB3"]


def test_node_dsns_addresses_argument_wins_and_missing_address_is_an_error():
    with ra.Cluster(nodes=["A", "B"], node_addresses={"A": "ha:1600"}) as c:
        with pytest.raises(ra.ConfigError, match="node `B` has no address"):
            oracle.node_dsns(c, "svc")
        d = oracle.node_dsns(c, "svc", addresses={"b": ("hb", 1700)}, form="easy_connect")
        assert d == {"A": "ha:1600/svc/A", "B": "hb:1700/svc/B"}
        with pytest.raises(ValueError):
            oracle.node_dsns(c, "svc", addresses={"B": "hb"}, form="tns")


def test_node_dsns_refuses_the_jdbc_forms():
    # A JDBC URL (`jdbc:oracle:thin:@...`) is no python-oracledb DSN: the
    # forms node_dsns documents are the descriptor and Easy Connect.
    with ra.Cluster(nodes=["A"], node_addresses={"A": "ha:1600"}) as c:
        for form in ("jdbc_descriptor", "JDBC_EASY_CONNECT", oracle.ConnectForm.JDBC_DESCRIPTOR, oracle.ConnectForm.JDBC_EASY_CONNECT):
            with pytest.raises(ValueError, match="form must be 'descriptor' or 'easy_connect'"):
                oracle.node_dsns(c, "svc", form=form)
        assert oracle.node_dsns(c, "svc", form=oracle.ConnectForm.EASY_CONNECT) == {"A": "ha:1600/svc/A"}
        assert oracle.node_dsns(c, "svc", form="Descriptor") == {"A": oracle.descriptor("ha", 1600, "svc", "A")}


@pytest.fixture
def fake_oracledb(monkeypatch):
    calls = []

    class FakePool:
        def __init__(self, kwargs):
            self.kwargs = kwargs
            self.closed = False

        def close(self, force=False):
            self.closed = True

    def create_pool(**kwargs):
        if kwargs["dsn"].find("FAIL") >= 0:
            raise RuntimeError("listener refused")
        p = FakePool(kwargs)
        calls.append(p)
        return p

    mod = types.ModuleType("oracledb")
    mod.create_pool = create_pool
    monkeypatch.setitem(sys.modules, "oracledb", mod)
    return calls


def test_create_node_pools_passes_one_instance_dsn_per_node(fake_oracledb):
    with ra.Cluster(CONFIG) as c:
        pools = oracle.create_node_pools(c, "sales", "scott", "tiger", min=1, max=4, increment=1)
        assert sorted(pools) == [0, 1, 2]
        for node_id, pool in pools.items():
            name = c.node_name(node_id)
            kw = pool.kwargs
            assert kw["dsn"] == oracle.node_dsns(c, "sales")[name]
            assert f"(INSTANCE_NAME={name})" in kw["dsn"] and "(SERVICE_NAME=sales)" in kw["dsn"]
            assert (kw["user"], kw["password"], kw["min"], kw["max"], kw["increment"]) == ("scott", "tiger", 1, 4, 1)
        # route with the core, take the connection from the routed node's pool
        with c.pick() as lease:
            assert pools[lease.node].kwargs["dsn"].endswith(f"(INSTANCE_NAME={lease.name})))")


def test_create_node_pools_closes_what_it_made_on_failure(fake_oracledb):
    with ra.Cluster(nodes=["A", "FAIL"], node_addresses={"A": "ha", "FAIL": "hf"}) as c:
        with pytest.raises(RuntimeError):
            oracle.create_node_pools(c, "svc", "u", "p")
    assert len(fake_oracledb) == 1 and fake_oracledb[0].closed
