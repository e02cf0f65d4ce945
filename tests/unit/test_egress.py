"""The egress policy (`app/egress.py`): every form of a refused address, what an operator's list
lets through, and a bad list refused with its value named."""

from __future__ import annotations

import pytest

from app.egress import literal_address, parse_networks, refusal


@pytest.mark.parametrize(
    ("host", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.1", "loopback"),
        ("0x7f000001", "loopback"),
        ("2130706433", "loopback"),
        ("017700000001", "loopback"),
        ("::1", "loopback"),
        ("[::1]", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("64:ff9b::a9fe:a9fe", "link-local"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("10.1.2.3", "private"),
        ("172.31.0.1", "private"),
        ("192.168.0.1", "private"),
        ("100.64.0.1", "private"),
        ("fd12::1", "private"),
        ("224.0.0.251", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "reserved"),
        ("::", "reserved"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
    ],
)
def test_every_form_of_a_refused_address_is_refused(host: str, kind: str) -> None:
    address = literal_address(host)
    assert address is not None, host
    assert refusal(address) == kind


def test_public_addresses_and_names() -> None:
    assert refusal(literal_address("93.184.216.34")) is None  # type: ignore[arg-type]
    assert refusal(literal_address("2606:2800:220:1::1")) is None  # type: ignore[arg-type]
    assert literal_address("hooks.example.com") is None  # a name: checked once resolved


def test_an_operator_s_networks_let_their_addresses_through() -> None:
    allowed = parse_networks(["10.0.0.0/8", "::1"])
    assert refusal(literal_address("10.9.9.9"), allowed) is None  # type: ignore[arg-type]
    assert refusal(literal_address("::1"), allowed) is None  # type: ignore[arg-type]
    assert refusal(literal_address("127.0.0.1"), allowed) == "loopback"  # type: ignore[arg-type]
    assert refusal(literal_address("::ffff:10.0.0.1"), allowed) is None  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"'10\.0\.0\.0/33' is not a network"):
        parse_networks(["10.0.0.0/33"])
