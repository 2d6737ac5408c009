"""The SSRF guard for the ``visit`` tool in live mode.

The agent chooses the URLs it visits, and a page it read can talk it into visiting
``http://169.254.169.254/`` or a service on the user's network. ``UrlGuard.check`` decides,
before any connection and on every redirect hop, whether a URL may be fetched: http(s) only, no
user info, no disguised numeric hosts (``2130706433``, ``0177.0.0.1``, ``127.1``), no local or
metadata names, and EVERY resolved address public (IPv4 carried inside IPv6 included). DNS
rebinding is closed by ``pinned_transport``, whose connections go only to approved addresses.

>>> def stub(host, port, *a, **k):
...     return [(2, 1, 6, "", ({"example.org": "93.184.215.14"}.get(host, "10.0.0.5"), port))]
>>> guard = UrlGuard(resolver=stub)
>>> guard.check("https://example.org/page")
>>> guard.check("http://nas/")
Traceback (most recent call last):
  ...
vsearcher_lite.net.guard.BlockedUrl: http://nas/: nas resolves to 10.0.0.5, a private address
"""

from __future__ import annotations

import ipaddress
import re
import socket
import unicodedata
from typing import Any, Callable, Iterable

import httpcore
import httpx

from vsearcher_lite.net.errors import HttpError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

ALLOWED_SCHEMES = ("http", "https")
BLOCKED_HOSTNAMES = frozenset({
    "localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback",
    "metadata", "metadata.google.internal", "instance-data", "instance-data.ec2.internal",
})
BLOCKED_HOST_SUFFIXES = (".localhost", ".internal", ".local")
# Metadata and platform services on addresses the generic checks would call public (or that
# deserve a clearer reason than "link-local").
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",  # AWS, GCP, Azure, OpenStack instance metadata
    "169.254.170.2",  # AWS ECS task metadata
    "fd00:ec2::254",  # AWS instance metadata over IPv6
    "100.100.100.200",  # Alibaba Cloud metadata
    "168.63.129.16",  # Azure wire server (a public address)
    "192.0.0.192",  # Oracle Cloud metadata
))
NAT64_PREFIX = ipaddress.ip_network("64:ff9b::/96")
SHARED_ADDRESS_SPACE = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT

_NUMERIC_PART = re.compile(r"^(0[xX][0-9a-fA-F]*|[0-9]+)$")
_OCTET = r"(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_CANONICAL_IPV4 = re.compile(rf"^{_OCTET}(\.{_OCTET}){{3}}$")


class BlockedUrl(HttpError):
    """The guard refused a URL (no connection was opened). ``transient``: the refusal may not
    hold next time (the host did not resolve), so a recorder must not store it."""

    def __init__(self, reason: str, url: str = "", *, transient: bool = False):
        super().__init__(f"{url}: {reason}" if url else reason, url=url, status=None,
                         reason=reason)
        self.transient = transient


def parse_loose_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address a permissive resolver (``inet_aton``) reads from ``host``, or ``None``:
    1 to 4 decimal, octal or hex parts, the forms used to disguise an internal address.

    >>> [str(parse_loose_ipv4(h)) for h in ("2130706433", "0x7f000001", "0177.0.0.1", "127.1")]
    ['127.0.0.1', '127.0.0.1', '127.0.0.1', '127.0.0.1']
    >>> parse_loose_ipv4("example.com") is None
    True
    """
    parts = host.split(".")
    if not 1 <= len(parts) <= 4 or not all(_NUMERIC_PART.match(p) for p in parts):
        return None
    try:
        values = [int(p, 16) if p[:2].lower() == "0x" else int(p, 8) if len(p) > 1 and p[0] == "0"
                  else int(p) for p in (p if p.lower() != "0x" else "0x0" for p in parts)]
    except ValueError:  # e.g. "08", not valid octal
        return None
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (4 - len(head)):
        return None
    return ipaddress.IPv4Address(int.from_bytes(bytes(head), "big") << 8 * (4 - len(head)) | last)


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address carries (mapped, 6to4, Teredo, NAT64, IPv4-compatible)."""
    found: list[ipaddress.IPv4Address] = []
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)
    if ip in NAT64_PREFIX:
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    if int(ip) >> 32 == 0 and int(ip) > 1:  # deprecated IPv4-compatible ::a.b.c.d
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return found


def address_problem(ip: IPAddress) -> str | None:
    """Why ``ip`` must not be fetched from (e.g. ``"a loopback address"``), or ``None`` if public.

    >>> address_problem(ipaddress.ip_address("::ffff:10.1.2.3"))
    'an IPv6 address carrying 10.1.2.3, a private address'
    >>> address_problem(ipaddress.ip_address("8.8.8.8")) is None
    True
    """
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if isinstance(ip, ipaddress.IPv6Address):
        for inner in embedded_ipv4(ip):
            problem = address_problem(inner)
            if problem:
                return f"an IPv6 address carrying {inner}, {problem}"
    checks = (("is_unspecified", "an unspecified address"), ("is_loopback", "a loopback address"),
              ("is_link_local", "a link-local address"), ("is_multicast", "a multicast address"),
              ("is_private", "a private address"), ("is_reserved", "a reserved address"))
    for attribute, label in checks:
        if getattr(ip, attribute, False):
            return label
    if isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local:
        return "a site-local address"
    if isinstance(ip, ipaddress.IPv4Address) and ip in SHARED_ADDRESS_SPACE:
        return "a shared (carrier-grade NAT) address"
    if not ip.is_global:
        return "a non-public address"
    return None


class UrlGuard:
    """``check(url)`` raises ``BlockedUrl`` for a URL that may not be fetched. ``resolver`` works
    like ``socket.getaddrinfo``; ``allow_hosts`` are exempt from the address checks (a test's
    own 127.0.0.1 server), not from the scheme and form checks."""

    def __init__(self, resolver: Callable[..., Iterable[tuple[Any, ...]]] = socket.getaddrinfo,
                 allow_hosts: Iterable[str] = ()):
        self.resolver = resolver
        self.allow_hosts = frozenset(h.lower().rstrip(".").strip("[]") for h in allow_hosts)

    def check(self, url: str) -> None:
        url = str(url)

        def block(reason: str) -> BlockedUrl:
            # Query strings may hold keys; the guard names the URL without them.
            return BlockedUrl(reason, url=url.split("?", 1)[0])

        if any(ch in url for ch in "\\\t\r\n\x00 "):
            raise block("the URL contains whitespace, control characters or backslashes")
        try:
            parsed = httpx.URL(url)
        except (httpx.InvalidURL, ValueError, UnicodeError) as exc:
            raise block(f"not a valid URL ({exc})") from None
        scheme = parsed.scheme.lower()
        if scheme not in ALLOWED_SCHEMES:
            raise block(f"scheme {scheme or '(none)'!r} is not allowed; only http and https")
        if parsed.userinfo:
            raise block("URLs with user info (user@host) are refused")
        host = self._normalised_host(parsed, block)
        if host in self.allow_hosts:
            return
        port = parsed.port or (443 if scheme == "https" else 80)
        self._approved_addresses(host, port, block)

    def approved_addresses(self, host: str, port: int) -> list[IPAddress]:
        """The connectable addresses of ``host`` at connect time, or ``BlockedUrl``."""
        host = host.lower().strip("[]").rstrip(".")

        def block(reason: str) -> BlockedUrl:
            return BlockedUrl(reason, url=f"{host}:{port}")

        if host in self.allow_hosts:
            literal = _ip_literal(host)
            return [literal] if literal is not None else self._resolve(host, port, block)
        return self._approved_addresses(host, port, block)

    def _approved_addresses(self, host: str, port: int,
                            block: Callable[[str], BlockedUrl]) -> list[IPAddress]:
        if host in BLOCKED_HOSTNAMES or host.endswith(BLOCKED_HOST_SUFFIXES):
            raise block(f"host {host!r} names a local or metadata service")
        literal = _ip_literal(host)
        if literal is not None:
            problem = address_problem(literal)
            if problem:
                raise block(f"{host} is {problem}")
            return [literal]
        if parse_loose_ipv4(host) is not None:
            raise block(f"host {host!r} is a disguised IP address ({parse_loose_ipv4(host)})")
        if not re.fullmatch(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*", host):
            raise block(f"host {host!r} has characters not allowed in a host name")
        addresses = self._resolve(host, port, block)
        for ip in addresses:
            problem = address_problem(ip)
            if problem:
                raise block(f"{host} resolves to {ip}, {problem}")
        return addresses

    def _normalised_host(self, parsed: httpx.URL, block: Callable[[str], BlockedUrl]) -> str:
        """The ASCII host as it goes on the wire, lower-case, without a trailing dot."""
        unicode_host = parsed.host
        if not unicode_host:
            raise block("the URL has no host")
        if "%" in unicode_host:
            raise block("percent-escapes and zone ids in the host are refused")
        folded = unicodedata.normalize("NFKC", unicode_host)
        bare = folded.rstrip(".")
        if folded != unicode_host and (_ip_literal(bare) or parse_loose_ipv4(bare)):
            raise block(f"host {unicode_host!r} normalises to the address {folded!r}")
        try:
            host = parsed.raw_host.decode("ascii").lower()
        except UnicodeDecodeError:
            raise block(f"host {unicode_host!r} cannot be encoded as an ASCII host name") from None
        host = host.strip("[]").removesuffix(".")
        if not host:
            raise block("the URL has an empty host")
        return host

    def _resolve(self, host: str, port: int,
                 block: Callable[[str], BlockedUrl]) -> list[IPAddress]:
        try:
            infos = list(self.resolver(host, port, 0, socket.SOCK_STREAM))
        except (OSError, UnicodeError) as exc:
            refusal = block(f"host {host!r} does not resolve ({exc})")
            refusal.transient = True
            raise refusal from None
        addresses: list[IPAddress] = []
        for info in infos:
            raw = str(info[4][0]).split("%", 1)[0]  # drop an IPv6 zone id
            try:
                addresses.append(ipaddress.ip_address(raw))
            except ValueError:
                raise block(f"host {host!r} resolved to something that is not an address: "
                            f"{raw!r}") from None
        if not addresses:
            raise block(f"host {host!r} resolved to no addresses")
        return addresses


def _ip_literal(host: str) -> IPAddress | None:
    """The address if ``host`` is a canonical IPv4 dotted quad or an IPv6 literal, else ``None``."""
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            return None
    if _CANONICAL_IPV4.match(host):
        return ipaddress.IPv4Address(host)
    return None


class PinnedNetworkBackend(httpcore.SyncBackend):
    """Connects only to guard-approved addresses (TLS still checks the certificate's host)."""

    def __init__(self, guard: UrlGuard):
        self.guard = guard

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        addresses = self.guard.approved_addresses(host, port)
        last_error: Exception | None = None
        for ip in addresses:
            try:
                return super().connect_tcp(str(ip), port, timeout=timeout,
                                           local_address=local_address,
                                           socket_options=socket_options)
            except httpcore.ConnectError as exc:  # try the next approved address
                last_error = exc
        assert last_error is not None
        raise last_error


def pinned_transport(guard: UrlGuard, **transport_options: Any) -> httpx.HTTPTransport:
    """An ``httpx.HTTPTransport`` whose connections go only to guard-approved addresses."""
    transport = httpx.HTTPTransport(**transport_options)
    pool = getattr(transport, "_pool", None)
    if not hasattr(pool, "_network_backend"):  # an httpx/httpcore layout this code does not know
        raise RuntimeError("cannot pin connections with this httpx version; upgrade or pass "
                           "transport=")
    pool._network_backend = PinnedNetworkBackend(guard)
    return transport
