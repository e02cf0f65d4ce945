"""Where a worker may send a request on an owner's behalf (a webhook's POST): not to the machine
itself, its private networks or the cloud's metadata service, unless the operator allows them
(`CHATWORKER_WEBHOOK_ALLOWED_NETWORKS`). Pure: the caller resolves names.

    address                                          refused as
    -----------------------------------------------  ---------------------------------------------
    127.0.0.0/8, ::1                                 loopback
    10/8, 172.16/12, 192.168/16, fc00::/7, 100.64/10 private
    169.254/16 (the metadata service), fe80::/10     link-local
    224/4, ff00::/8                                  multicast
    0.0.0.0, ::, 240/4, documentation, benchmarking  reserved
    ::ffff:a.b.c.d, 64:ff9b::a.b.c.d                 as the IPv4 address they carry

A host written as a number in any form an address parser takes (`2130706433`, `0x7f000001`,
`127.1`) is that address. Registration checks a host that is an address; a name is checked when
the worker resolves it to connect, and the worker connects to the address it checked (a name
that resolves elsewhere a moment later changes nothing).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Sequence

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT: private in practice


def parse_networks(values: Iterable[str]) -> tuple[Network, ...]:
    """CIDR networks (or single addresses); ValueError names a bad one."""
    found = []
    for value in values:
        try:
            found.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{value!r} is not a network (e.g. 10.0.0.0/8 or ::1)") from None
    return tuple(found)


def literal_address(host: str) -> Address | None:
    """The address a URL's host names by itself (any numeric form), or None for a name."""
    bare = host.strip("[]")
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(bare))  # 127.1, 0x7f000001, 2130706433
    except OSError:
        return None


def refusal(address: Address, allowed: Sequence[Network] = ()) -> str | None:
    """Why a request may not go to `address` (None: it may)."""
    if any(address.version == network.version and address in network for network in allowed):
        return None
    if isinstance(address, ipaddress.IPv6Address):
        carried = address.ipv4_mapped or (
            ipaddress.IPv4Address(int(address) & 0xFFFFFFFF) if address in _NAT64 else None
        )
        if carried is not None:
            return refusal(carried, allowed)
    kinds = (
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("reserved", address.is_unspecified or address.is_reserved),
        ("private", address.is_private or address in _SHARED),
        ("reserved", not address.is_global),
    )
    return next((kind for kind, found in kinds if found), None)


__all__ = ["Address", "Network", "literal_address", "parse_networks", "refusal"]
