"""One webhook POST, sent only where the address check allows, to the address checked.

A hook's URL names a host; the name is resolved once per hop and every address it
resolves to is checked (``address_refusal``): loopback, link-local (cloud metadata
at 169.254.169.254), private, shared (CGNAT 100.64/10), multicast, reserved and
unspecified addresses, and IPv6 forms that carry one of those inside (IPv4-mapped,
IPv4-compatible, 6to4, Teredo, NAT64), are refused unless a network the site lists
(``PORTAL_WEBHOOK_ALLOWED_NETWORKS``) holds the address. The connection then goes to
that very address (pinned): a second resolution cannot steer it elsewhere (DNS
rebinding). The request still carries the URL's host in ``Host`` and, for https, in
the TLS server name, and the certificate is verified against it.

Redirects are never followed by a library: each one is checked like the first URL
and followed by hand, at most ``MAX_REDIRECTS`` times. Only http and https, on ports
80, 443 and 1024 and above (not the well-known ports of other services: SMTP, SSH…).
"""

import http.client
import ipaddress
import socket
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# host, port -> the addresses it resolves to (tests pass their own: no DNS, no packet).
Resolver = Callable[[str, int], list[str]]

MAX_REDIRECTS = 3
REDIRECT_STATUSES = {301, 302, 303, 307, 308}
SCHEMES = {"http": 80, "https": 443}
SHARED_ADDRESS_SPACE = ipaddress.ip_network("100.64.0.0/10")  # CGNAT
NAT64_PREFIXES = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))


class Refused(Exception):
    """The URL or an address it leads to is not allowed; nothing was sent there."""


class SendFailed(Exception):
    """The request was tried and did not get an answer (connection, TLS, timeout)."""


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address leads to when a router translates it."""
    inside = [address.ipv4_mapped, address.sixtofour]
    if address.teredo:
        inside += list(address.teredo)
    if any(address in prefix for prefix in NAT64_PREFIXES) or int(address) >> 32 == 0:
        inside.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return [a for a in inside if a is not None]


def address_refusal(address: IPAddress, allowed: Sequence[IPNetwork] = ()) -> str | None:
    """Why a delivery may not go to ``address``, or None when it may."""
    if any(address.version == net.version and address in net for net in allowed):
        return None
    if isinstance(address, ipaddress.IPv6Address):
        for inside in _embedded_ipv4(address):
            if (why := address_refusal(inside, allowed)) is not None:
                return f"{address} carries {inside}: {why}"
    checks = [
        (address.is_loopback, "a loopback address"),
        (address.is_link_local, "a link-local address"),
        (address.is_unspecified, "the unspecified address"),
        (address.is_multicast, "a multicast address"),
        (address in SHARED_ADDRESS_SPACE, "a shared (CGNAT) address"),
        (address.is_private, "a private address"),
        (address.is_reserved, "a reserved address"),
        (isinstance(address, ipaddress.IPv6Address) and address.is_site_local, "site-local"),
        (not address.is_global, "not a public address"),
    ]
    for refused, why in checks:
        if refused:
            return f"{address} is {why}"
    return None


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str


def target_of(url: str) -> Target:
    """The scheme, host, port and path of ``url``, or Refused saying what is wrong."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise Refused(f"not a valid URL: {error}") from None
    if parts.scheme not in SCHEMES:
        raise Refused("only http and https URLs")
    if not parts.hostname:
        raise Refused("the URL names no host")
    if parts.username or parts.password:
        raise Refused("no user name or password in the URL")
    port = port or SCHEMES[parts.scheme]
    if port not in (80, 443) and port < 1024:
        raise Refused(f"port {port}: only 80, 443 and 1024 and above")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Target(parts.scheme, parts.hostname, port, path)


def checked_address(
    target: Target, *, allowed: Sequence[IPNetwork], resolver: Resolver
) -> IPAddress:
    """The address to connect to: the host resolved once, every address it has allowed."""
    try:
        names = [target.host] if is_literal(target.host) else resolver(target.host, target.port)
        addresses = [ipaddress.ip_address(name.split("%")[0]) for name in names]
    except (OSError, ValueError) as error:
        raise Refused(f"{target.host} does not resolve: {error}") from None
    if not addresses:
        raise Refused(f"{target.host} does not resolve")
    for address in addresses:
        if (why := address_refusal(address, allowed)) is not None:
            raise Refused(f"{target.host}: {why}")
    return addresses[0]


def is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class _PinnedHTTP(http.client.HTTPConnection):
    def __init__(self, target: Target, address: IPAddress, timeout: float) -> None:
        super().__init__(target.host, target.port, timeout=timeout)
        self._address = str(address)

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, target: Target, address: IPAddress, timeout: float) -> None:
        super().__init__(
            target.host, target.port, timeout=timeout, context=ssl.create_default_context()
        )
        self._address = str(address)

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        # The name checked in the certificate and sent as SNI is the URL's, not the address.
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


def _send_once(
    target: Target, address: IPAddress, body: bytes, headers: dict[str, str], timeout: float
) -> tuple[int, str | None]:
    kind = _PinnedHTTPS if target.scheme == "https" else _PinnedHTTP
    connection = kind(target, address, timeout)
    try:
        connection.request("POST", target.path, body=body, headers=headers)
        response = connection.getresponse()
        # The body is not read: only the status counts, and a receiver that sends it
        # slowly must not hold the worker.
        return response.status, response.getheader("Location")
    except (OSError, http.client.HTTPException) as error:
        raise SendFailed(f"{type(error).__name__}: {error}") from None
    finally:
        connection.close()


def post(
    url: str,
    *,
    body: bytes,
    headers: dict[str, str],
    allowed: Sequence[IPNetwork],
    resolver: Resolver = system_resolver,
    timeout: float = 10.0,
) -> int:
    """POST ``body`` to ``url``, following redirects by hand; the final HTTP status.
    Refused (nothing sent to the refused address) or SendFailed otherwise."""
    for _hop in range(MAX_REDIRECTS + 1):
        target = target_of(url)
        address = checked_address(target, allowed=allowed, resolver=resolver)
        status, location = _send_once(target, address, body, headers, timeout)
        if status not in REDIRECT_STATUSES or not location:
            return status
        url = urljoin(url, location)
    raise SendFailed(f"more than {MAX_REDIRECTS} redirects")
