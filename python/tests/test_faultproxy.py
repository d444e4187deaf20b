"""The tests' own TCP proxy (faultproxy.py), which the continuity, replay
matrix, 2PC and pool tests inject their faults with: its port stays its own
for its whole life (refusing included), and refuse / refuse_new / heal do
to sessions and connects what those tests rely on."""

from __future__ import annotations

import errno
import socket

import psycopg
import pytest

from faultproxy import FaultProxy


def server_port(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
        return conn.execute("SELECT inet_server_port()").fetchone()[0]


def test_a_refused_proxy_keeps_its_port_so_heal_listens_there_again(pg):
    # While the proxy refused, its port was free before: the kernel could
    # give it to an outgoing connection as its local port, and heal() then
    # failed to listen there (EADDRINUSE). Such a connection, made here on
    # purpose, must find the port taken.
    with FaultProxy(pg.port["RAC1"]) as px:
        dsn = px.dsn(pg.dsn["RAC1"])
        px.refuse()
        squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            with pytest.raises(OSError) as taken:
                squatter.bind(("127.0.0.1", px.port))
                squatter.connect(("127.0.0.1", pg.port["RAC2"]))
            assert taken.value.errno == errno.EADDRINUSE, taken.value  # the proxy holds its port
            with pytest.raises(psycopg.OperationalError):
                server_port(dsn)
            px.heal()
            assert server_port(dsn) == pg.port["RAC1"]
        finally:
            squatter.close()


def test_refuse_cuts_open_sessions_and_fails_connects_until_heal(pg):
    with FaultProxy(pg.port["RAC1"]) as px:
        dsn = px.dsn(pg.dsn["RAC1"])
        open_session = psycopg.connect(dsn, autocommit=True, connect_timeout=2)
        try:
            open_session.execute("SELECT 1")
            px.refuse()
            with pytest.raises(psycopg.OperationalError):
                open_session.execute("SELECT 1")
        finally:
            open_session.close()
        for _ in range(3):  # each connect fails at once, again and again
            with pytest.raises(psycopg.OperationalError):
                server_port(dsn)
        px.heal()
        assert server_port(dsn) == pg.port["RAC1"]


def test_refuse_new_fails_connects_and_leaves_open_sessions_alone(pg):
    with FaultProxy(pg.port["RAC1"]) as px:
        dsn = px.dsn(pg.dsn["RAC1"])
        with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as open_session:
            px.refuse_new()
            with pytest.raises(psycopg.OperationalError):
                server_port(dsn)
            assert open_session.execute("SELECT inet_server_port()").fetchone()[0] == pg.port["RAC1"]
            px.heal()
            assert server_port(dsn) == pg.port["RAC1"]
