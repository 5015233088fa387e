"""Spreading requests over several servers (replicas): which one gets the next request.

Two policies, as load balancers in front of LLM servers offer them:

- ``round-robin``: replica 0, 1, …, n−1, 0, … in turn, whatever they are doing;
- ``least-outstanding``: the replica with the fewest requests in flight *from this process*
  (ties go round-robin), so a slower replica is sent less. With a fixed number of closed-loop
  users this keeps every replica equally busy, and each then serves requests in proportion
  to its speed.

A balancer is shared by every user of one Locust process (gevent runs them in one thread, so
plain counters suffice). With ``--processes`` or Locust's distributed mode each process
balances its own requests: least-outstanding then sees only its own share of the in-flight
requests, as several independent balancers would.

Nothing here imports Locust or gevent: the policies are plain objects with unit tests.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence

from vprof.common.errors import RunError
from vprof.common.suggest import suggestion
from vprof.common.urls import check_server_url
from vprof.locustfiles.optiontable import BALANCE_CHOICES, DEFAULT_BALANCE

LEAST_OUTSTANDING, ROUND_ROBIN = BALANCE_CHOICES


class Balancer:
    """Hands out replica indices: ``pick()`` before a request, ``done(i)`` after it."""

    policy = ""

    def __init__(self, replicas: Sequence[str]) -> None:
        if not replicas:
            raise ValueError("a balancer needs at least one replica")
        self.replicas = tuple(replicas)
        self.in_flight = [0] * len(self.replicas)
        self.sent = [0] * len(self.replicas)
        self._next = 0  # round-robin position (ties of least-outstanding too)

    def pick(self, among: Sequence[int] | None = None) -> int:
        """The replica the next request goes to (one of ``among``, when given: alternating
        servers load one side at a time); counts it as in flight until ``done``."""
        index = self._choose(among if among is not None else range(len(self.replicas)))
        self._next = (index + 1) % len(self.replicas)
        self.in_flight[index] += 1
        self.sent[index] += 1
        return index

    def done(self, index: int) -> None:
        """The request sent to ``index`` ended (answered, failed or cut off)."""
        self.in_flight[index] = max(0, self.in_flight[index] - 1)

    def _turn(self, among: Sequence[int]) -> list[int]:
        """``among`` in round-robin order, starting from the next replica's turn."""
        n = len(self.replicas)
        allowed = set(among)
        return [i for i in ((self._next + k) % n for k in range(n)) if i in allowed]

    def _choose(self, among: Sequence[int]) -> int:
        raise NotImplementedError


class RoundRobin(Balancer):
    """Each replica in turn."""

    policy = ROUND_ROBIN

    def _choose(self, among: Sequence[int]) -> int:
        return self._turn(among)[0]


class LeastOutstanding(Balancer):
    """The replica with the fewest requests in flight; ties in round-robin order."""

    policy = LEAST_OUTSTANDING

    def _choose(self, among: Sequence[int]) -> int:
        return min(self._turn(among), key=lambda i: self.in_flight[i])


def make_balancer(policy: str, replicas: Sequence[str]) -> Balancer:
    """The balancer for ``policy`` (one of ``BALANCE_CHOICES``) over ``replicas``."""
    kinds: dict[str, type[Balancer]] = {
        ROUND_ROBIN: RoundRobin,
        LEAST_OUTSTANDING: LeastOutstanding,
    }
    return kinds[check_policy(policy)](replicas)


def check_policy(policy: str, key: str = "--balance") -> str:
    """``policy`` if it is one of ``BALANCE_CHOICES``; a clear error naming them otherwise."""
    if policy in BALANCE_CHOICES:
        return policy

    raise RunError(
        f"{policy!r} is not a balancing policy (choose {' or '.join(BALANCE_CHOICES)})",
        key=key,
        hint=suggestion(policy, BALANCE_CHOICES, f"e.g. {key} {DEFAULT_BALANCE}"),
    )


def check_replicas(urls: Sequence[str], key: str = "--url") -> tuple[str, ...]:
    """Every URL checked as a server's base address (``common.urls``), none given twice.

    Two URLs are one server when their ports and paths agree and their hosts resolve to a
    common address — ``localhost`` and ``127.0.0.1`` are one, and so is every address of this
    machine (a server listening on all of them answers at each): measuring one server as two
    replicas would double its capacity.
    """
    from urllib.parse import urlsplit

    checked = [check_server_url(url, key=key) for url in urls]
    if len(checked) < 2:
        return tuple(checked)
    local = _local_addresses()
    seen: list[tuple[int, str, frozenset[str], str]] = []
    for url, text in zip(urls, checked, strict=True):
        parts = urlsplit(text)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        path = parts.path.rstrip("/")
        where = _addresses(parts.hostname or "", port, local)
        for other_port, other_path, other_where, other_url in seen:
            if (port, path) == (other_port, other_path) and where & other_where:
                how = "this machine's" if where & other_where == {_THIS_MACHINE} else "the same"
                raise RunError(
                    f"{url!r} names the same server as {other_url!r} ({how} address, port "
                    f"{port}): each replica once",
                    key=key,
                    hint="give each server's address once; replicas are different servers",
                )
        seen.append((port, path, where, url))
    return tuple(checked)


_THIS_MACHINE = "this machine"


def _local_addresses() -> frozenset[str]:
    """The addresses of this machine's interfaces (a server on 0.0.0.0 answers at each)."""
    try:
        import psutil

        return frozenset(
            str(ipaddress.ip_address(a.address.split("%")[0]))
            for addrs in psutil.net_if_addrs().values()
            for a in addrs
            if a.family in (socket.AF_INET, socket.AF_INET6)
        )
    except (ImportError, OSError, ValueError):
        return frozenset()


def _addresses(host: str, port: int, local: frozenset[str]) -> frozenset[str]:
    """Where ``host`` leads: its resolved addresses, any of this machine's as one; a name that
    does not resolve stays itself (the health check then says it cannot be reached)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return frozenset({host.lower()})
    out = set()
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
            address = address.ipv4_mapped
        mine = address.is_loopback or address.is_unspecified or str(address) in local
        out.add(_THIS_MACHINE if mine else str(address))
    return frozenset(out) or frozenset({host.lower()})


def parse_hosts(text: str, key: str = "--hosts") -> tuple[str, ...]:
    """A comma-separated list of server URLs (``--hosts``), checked; ``()`` for none."""
    if not text.strip():
        return ()
    return check_replicas([part for part in text.split(",")], key=key)
