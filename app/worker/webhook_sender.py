"""One webhook POST, sent so that a receiver cannot hurt the worker:

- to an address the egress policy allows (`app/egress.py`): the host is resolved here, each
  address checked, and the request connects to the address that was checked (the name cannot
  resolve elsewhere in between); the `Host` header and TLS (SNI and the certificate's name) keep
  the URL's host;
- within one deadline covering the lookup, the connection, the request and the answer's status
  line (a receiver that trickles its answer is cut off at the deadline, not per read);
- reading nothing of the answer but its status: the body is never read (a 200 MB answer costs
  the worker nothing), and what the delivery keeps is a short message of our own, never the
  receiver's words.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import httpx

from app.egress import Network, literal_address, refusal


@dataclass(frozen=True)
class Attempt:
    status_code: int | None  # None: no answer
    error: str | None = None  # why it failed, in our words
    permanent: bool = False  # it can never be sent (an invalid URL): give the delivery up


async def post(
    http: httpx.AsyncClient,
    url: str,
    payload: str,
    headers: Mapping[str, str],
    *,
    deadline: float,
    allowed: Sequence[Network] = (),
) -> Attempt:
    target = _parsed(url)
    if target is None:
        return Attempt(None, "the URL is invalid", permanent=True)
    try:
        async with asyncio.timeout(deadline):
            chosen, why = await _address(target, allowed)
            if chosen is None:
                return Attempt(None, why)
            request_url = target.copy_with(host=chosen)
            extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
            sent_headers = {**headers, "host": target.netloc.decode("ascii")}
            async with http.stream(
                "POST", request_url, content=payload, headers=sent_headers, extensions=extensions
            ) as response:
                status = response.status_code
    except (TimeoutError, httpx.HTTPError) as exc:
        return Attempt(None, _failure(exc, deadline))
    if 200 <= status < 300:
        return Attempt(status)
    return Attempt(status, f"HTTP {status}")


def _failure(exc: Exception, deadline: float) -> str:
    if isinstance(exc, (TimeoutError, httpx.TimeoutException)):
        return f"no answer within {deadline:g} s"
    if isinstance(exc, httpx.ConnectError):
        return "could not connect"
    return "the request failed"


def _parsed(url: str) -> httpx.URL | None:
    try:
        target = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError):
        return None
    if target.scheme not in ("http", "https") or not target.host:
        return None
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        return None
    return target


async def _address(target: httpx.URL, allowed: Sequence[Network]) -> tuple[str | None, str]:
    """The first address of the host the policy allows (as text), or why none is."""
    literal = literal_address(target.host)
    if literal is not None:
        candidates = [literal]
    else:
        port = target.port or (443 if target.scheme == "https" else 80)
        try:
            found = await asyncio.get_running_loop().getaddrinfo(
                target.host, port, type=socket.SOCK_STREAM
            )
        except OSError:
            return None, "the host name does not resolve"
        candidates = [a for a in (literal_address(str(info[4][0])) for info in found) if a]
    reasons = []
    for address in candidates:
        why = refusal(address, allowed)
        if why is None:
            return str(address), ""
        reasons.append(why)
    return None, f"the receiver's address is {reasons[0] if reasons else 'unknown'} (not allowed)"


__all__ = ["Attempt", "post"]
