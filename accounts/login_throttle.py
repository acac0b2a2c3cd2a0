"""Counting failed log-ins per (user name, client address) and per address, in the cache (Redis).

After ``LOGIN_MAX_FAILURES`` failures for one user name from one address within
``LOGIN_WINDOW_S``, that name is locked at that address for ``LOGIN_WINDOW_S``;
after ``LOGIN_MAX_FAILURES_PER_ADDRESS`` failures from one address, whatever the
names, the whole address is. A locked attempt is refused before the password is
checked, so a guesser learns nothing even when it guesses right. The name is
counted per address so that a guesser cannot lock a user out: the user logs in
from their own address all the same. The per-address cap bounds what one
guesser tries in all. A success clears the (name, address) count; the
address's stays, or one valid account would let its owner reset the count
between guesses.

Counts are Redis ``INCR``s (``cache.incr``), atomic across web processes: two
concurrent failures are two. When the cache does not answer, log-in is allowed
and a warning logged (fail open): a Redis restart must not lock everyone out,
and passwords are still checked.
"""

import datetime as dt
import hashlib
import ipaddress
import logging
import unicodedata
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest
from django.utils import timezone
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Lockout:
    until: dt.datetime

    @property
    def retry_after_s(self) -> int:
        return max(1, int((self.until - timezone.now()).total_seconds() + 0.999))


def _client_address_text(request: HttpRequest) -> str:
    address = request.META.get("REMOTE_ADDR", "")
    if settings.PROXY_COUNT:
        forwarded = [
            part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
        ]
        if len(forwarded) >= settings.PROXY_COUNT:
            address = forwarded[-settings.PROXY_COUNT]
    return address


def client_ip(request: HttpRequest) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The client's address as the outermost of ``PROXY_COUNT`` trusted proxies saw it
    (the connection's own with none); None when that is no address."""
    try:
        return ipaddress.ip_address(_client_address_text(request))
    except ValueError:
        return None


def client_address(request: HttpRequest) -> str:
    """The client's address (``client_ip``) as log-ins are counted by.

    IPv6 clients are counted per /64: one host usually holds a whole /64 and could
    otherwise take a new address for every guess.
    """
    parsed = client_ip(request)
    if parsed is None:
        return _client_address_text(request) or "unknown"
    if parsed.version == 6:
        return str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return str(parsed)


def _user_at_address_key(username: str, address: str) -> str:
    # Hashed: a user name may hold any character, and keys stay short. The NUL
    # between them cannot be typed into either, so no two pairs share a key.
    normal = unicodedata.normalize("NFKC", username).strip().casefold()
    return "user:" + hashlib.sha256(f"{normal}\0{address}".encode()).hexdigest()[:32]


def _address_key(address: str) -> str:
    return f"address:{address}"


def _limits(username: str, address: str) -> dict[str, int]:
    return {
        _user_at_address_key(username, address): settings.LOGIN_MAX_FAILURES,
        _address_key(address): settings.LOGIN_MAX_FAILURES_PER_ADDRESS,
    }


def login_lockout(*, username: str, address: str) -> Lockout | None:
    """The lockout that refuses this attempt, if any (the later one when both apply)."""
    keys = [f"login:lock:{key}" for key in _limits(username, address)]
    try:
        locks = cache.get_many(keys)
    except RedisError as error:
        logger.warning("log-in throttle off: the cache does not answer (%s)", error)
        return None
    now = timezone.now().timestamp()
    # A lock's end is kept as epoch seconds: the cache holds JSON, not datetimes.
    ends = [until for until in locks.values() if isinstance(until, int | float) and until > now]
    return Lockout(until=dt.datetime.fromtimestamp(max(ends), dt.UTC)) if ends else None


def login_failed(*, username: str, address: str) -> Lockout | None:
    """Count a failure; the lockout it starts, if it reaches a limit."""
    window = settings.LOGIN_WINDOW_S
    started: Lockout | None = None
    try:
        for key, limit in _limits(username, address).items():
            count_key = f"login:failures:{key}"
            # The window starts with the first failure; add() never resets a count.
            cache.add(count_key, 0, timeout=window)
            try:
                failures = cache.incr(count_key)
            except ValueError:  # the count expired between add() and incr()
                cache.add(count_key, 0, timeout=window)
                failures = cache.incr(count_key)
            if failures >= limit:
                until = timezone.now() + dt.timedelta(seconds=window)
                # add(): the first lockout's end stands, a later failure cannot extend it.
                cache.add(f"login:lock:{key}", until.timestamp(), timeout=window)
                started = Lockout(until=until)
    except RedisError as error:
        logger.warning("log-in throttle off: the cache does not answer (%s)", error)
        return None
    if started:
        logger.warning(
            "log-in locked until %s: too many failures (user name %r, address %s)",
            started.until.isoformat(timespec="seconds"),
            username,
            address,
        )
    return started


def login_succeeded(*, username: str, address: str) -> None:
    """Clear the count of this user name at this address (the address's own stays)."""
    try:
        cache.delete(f"login:failures:{_user_at_address_key(username, address)}")
    except RedisError as error:
        logger.warning("log-in throttle: cannot clear the count (%s)", error)
