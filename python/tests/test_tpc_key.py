"""racaffinity.tpc.transaction_key is the core's XA transaction key
(racaffinity_xa_transaction_key): the fixed vectors below are those of
rust/core/tests/transactions.rs, tests/c/test_api.c and Java's
XidKeyTest, so a binding that built its own key would show here."""

from __future__ import annotations

import pytest

import racaffinity as ra
from racaffinity.tpc import DEFAULT_FORMAT_ID, transaction_key

VECTORS = [
    (0x1234, "abc", "00001234616263"),
    (-1, "g", "ffffffff67"),
    (DEFAULT_FORMAT_ID, "x", "5241464678"),
    (7, "x" * 60, "00000007" + "78" * 60),
    (7, "x" * 61, "00000007c508e75f24e25db94dff52c9564a51025f69510191cc7dc2cfe16a6cb4b29f53"),
    (7, "", ""),
    (7, "y" * 65, "79" * 65),
]


@pytest.mark.parametrize("format_id, gtrid, key", VECTORS)
def test_the_key_is_the_cores(format_id: int, gtrid: str, key: str) -> None:
    assert transaction_key(gtrid, format_id).hex() == key


def test_the_gtrid_is_its_utf8_bytes() -> None:
    assert transaction_key("é", 1) == b"\x00\x00\x00\x01\xc3\xa9"


def test_a_key_the_core_refuses_is_refused_by_the_tx_calls() -> None:
    c = ra.Cluster("nodes = A, B")
    try:
        for bad in (transaction_key("", 7), transaction_key("y" * 65, 7)):
            with pytest.raises(ra.InvalidArgumentError):
                c.tx_begin(bad)
        one, two = transaction_key("tx", 1), transaction_key("tx", 2)
        c.tx_begin(one)
        c.tx_begin(two)
        c.tx_end(one)
        with pytest.raises(ra.UnknownTransactionError):
            c.tx_end(one)  # another format's branch was another transaction
        c.tx_end(two)
    finally:
        c.close()


def test_a_format_id_out_of_int32_is_refused() -> None:
    with pytest.raises(OverflowError):
        transaction_key("g", 1 << 31)
