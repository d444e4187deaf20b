"""Node-failure classification (`racaffinity._failures`) against errors the
local nodes really send: it goes by SQLSTATE and connection state, so words
in a message (an application's text, a role name) change nothing."""

from __future__ import annotations

import psycopg
import pytest

from racaffinity._failures import connection_lost, is_node_failure
from racaffinity.pools import NodePools

from conftest import NAMES


def test_an_application_error_with_a_shutdown_sqlstate_and_crash_words_is_not_a_node_failure(pg):
    # An application may raise any SQLSTATE with any text; the node and the
    # session are fine afterwards.
    with psycopg.connect(pg.dsn["RAC1"], autocommit=True, connect_timeout=5) as conn:
        with pytest.raises(psycopg.OperationalError) as info:
            conn.execute(
                "DO $$ BEGIN RAISE EXCEPTION 'terminating connection due to unexpected postmaster exit'"
                " USING ERRCODE = '57P01'; END $$"
            )
        assert info.value.sqlstate == "57P01"
        assert not is_node_failure(info.value)
        assert not connection_lost(conn, info.value)
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_refused_connect_whose_role_names_the_crash_words_is_not_a_node_failure(pg):
    # The node answers (no such role): the error is this user's, whatever
    # the role is called.
    with pytest.raises(psycopg.OperationalError) as info:
        psycopg.connect(pg.dsn["RAC1"] + " user='the database system is shutting down'", connect_timeout=5)
    assert not is_node_failure(info.value)


def test_a_role_with_fatal_in_its_name_on_a_dead_port_is_a_node_failure(pg):
    with pytest.raises(psycopg.OperationalError) as info:
        psycopg.connect("host=127.0.0.1 port=1 user='FATAL: x' dbname='FATAL:  y'", connect_timeout=5)
    assert is_node_failure(info.value)


def test_pools_count_neither_as_a_failure_of_the_node(pg, cluster_factory):
    c = cluster_factory(nodes=NAMES)
    with NodePools(c, pg.dsn, min_size=1, max_size=2, timeout=5.0) as pools:
        for _ in range(5):
            with pytest.raises(psycopg.OperationalError):
                with pools.connection() as conn:
                    conn.execute("DO $$ BEGIN RAISE EXCEPTION 'postmaster exit' USING ERRCODE = '57P01'; END $$")
        assert sum(n["failures"] for n in c.metrics()["nodes"]) == 0


def test_a_crash_counts_and_a_terminated_session_does_not(pg, restart_after):
    # Both end the session with FATAL 57P01; the server's routine field tells
    # a backend that saw its postmaster die from one told to terminate.
    with psycopg.connect(pg.dsn["RAC3"], autocommit=True, connect_timeout=5) as admin, psycopg.connect(
        pg.dsn["RAC3"], autocommit=True, connect_timeout=5
    ) as victim:
        admin.execute("SELECT pg_terminate_backend(%s)", (victim.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError) as terminated:
            victim.execute("SELECT 1")
    assert terminated.value.sqlstate == "57P01" and not is_node_failure(terminated.value)
    conn = psycopg.connect(pg.dsn["RAC3"], autocommit=True, connect_timeout=5)
    pg.kill(3)
    restart_after.append(3)
    with pytest.raises(psycopg.OperationalError) as crashed:
        conn.execute("SELECT 1")
    conn.close()
    assert is_node_failure(crashed.value), crashed.value.sqlstate
