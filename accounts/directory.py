"""Reading the site's LDAP directory: people, their Unix logins and their groups.

The portal only reads, with its own service bind (``PORTAL_LDAP_BIND_DN``); a person's
password is checked by binding as them (``accounts.ldap_login``). An entry is
*disabled* when its ``shadowExpire`` day has come, as pam_unix and sssd read it, and
*gone* when the search no longer finds it under ``PORTAL_LDAP_USER_FILTER``.
"""

import datetime as dt
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import ldap
from django.conf import settings
from ldap.filter import escape_filter_chars

logger = logging.getLogger(__name__)

# The attributes read of a person (never userPassword: the service bind may not).
PERSON_ATTRIBUTES = ("uid", "cn", "givenName", "sn", "mail", "uidNumber", "shadowExpire")


class DirectoryUnavailable(Exception):
    """The directory did not answer, or refused the portal's own bind; the message says."""


@dataclass(frozen=True)
class DirectoryEntry:
    dn: str
    login: str  # what the person types at log-in (PORTAL_LDAP_LOGIN_ATTRIBUTE)
    posix_username: str  # PORTAL_LDAP_POSIX_ATTRIBUTE
    email: str
    first_name: str
    last_name: str
    disabled: bool


def configured() -> bool:
    return bool(settings.LDAP_URL)


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _first(attrs: Mapping[str, Sequence[bytes | str]], name: str) -> str:
    """The first value of ``name`` (attribute names are matched without case)."""
    for key, values in attrs.items():
        if key.lower() == name.lower() and values:
            return _text(values[0])
    return ""


def is_expired(shadow_expire: str, today: dt.date) -> bool:
    """``shadowExpire`` is a day count since 1970-01-01; the account ends on that day.
    Empty or -1: never."""
    try:
        day = int(shadow_expire)
    except ValueError:
        return False
    return day >= 0 and dt.date(1970, 1, 1) + dt.timedelta(days=day) <= today


def entry_of(dn: str, attrs: Mapping[str, Sequence[bytes | str]]) -> DirectoryEntry:
    return DirectoryEntry(
        dn=dn,
        login=_first(attrs, settings.LDAP_LOGIN_ATTRIBUTE),
        posix_username=_first(attrs, settings.LDAP_POSIX_ATTRIBUTE),
        email=_first(attrs, "mail"),
        first_name=_first(attrs, "givenName"),
        last_name=_first(attrs, "sn"),
        disabled=is_expired(_first(attrs, "shadowExpire"), dt.datetime.now(dt.UTC).date()),
    )


def _connect() -> "ldap.ldapobject.LDAPObject":
    connection = ldap.initialize(settings.LDAP_URL)
    connection.set_option(ldap.OPT_NETWORK_TIMEOUT, settings.LDAP_TIMEOUT_S)
    connection.set_option(ldap.OPT_TIMEOUT, settings.LDAP_TIMEOUT_S)
    connection.set_option(ldap.OPT_REFERRALS, 0)
    try:
        if settings.LDAP_START_TLS:
            connection.start_tls_s()
        connection.simple_bind_s(settings.LDAP_BIND_DN, settings.LDAP_BIND_PASSWORD)
    except ldap.INVALID_CREDENTIALS:
        raise DirectoryUnavailable(
            f"the directory {settings.LDAP_URL} refused the portal's bind as "
            f"{settings.LDAP_BIND_DN} (PORTAL_LDAP_BIND_DN, PORTAL_LDAP_BIND_PASSWORD)"
        ) from None
    except ldap.LDAPError as error:
        raise DirectoryUnavailable(f"the directory {settings.LDAP_URL}: {_reason(error)}") from None
    return connection


def _reason(error: ldap.LDAPError) -> str:
    detail = error.args[0] if error.args and isinstance(error.args[0], dict) else {}
    return str(detail.get("desc") or error)


def _search(base: str, query: str, attributes: Iterable[str]) -> list[tuple[str, dict]]:
    connection = _connect()
    try:
        found = connection.search_s(base, ldap.SCOPE_SUBTREE, query, list(attributes))
    except ldap.NO_SUCH_OBJECT:
        return []
    except ldap.LDAPError as error:
        raise DirectoryUnavailable(f"the directory {settings.LDAP_URL}: {_reason(error)}") from None
    finally:
        connection.unbind_s()
    return [(dn, attrs) for dn, attrs in found if dn]  # skip search references


def _people(condition: str) -> list[DirectoryEntry]:
    query = f"(&{settings.LDAP_USER_FILTER}{condition})"
    return [
        entry_of(dn, attrs)
        for dn, attrs in _search(settings.LDAP_USER_BASE, query, attributes_read())
    ]


def attributes_read() -> tuple[str, ...]:
    return (*PERSON_ATTRIBUTES, settings.LDAP_LOGIN_ATTRIBUTE, settings.LDAP_POSIX_ATTRIBUTE)


def person_where(attribute: str, value: str) -> DirectoryEntry | None:
    """The one person whose ``attribute`` is ``value``; None when none is (or several
    are: a directory that cannot say who someone is names no one)."""
    found = _people(f"({attribute}={escape_filter_chars(value)})")
    if len(found) > 1:
        logger.warning(
            "directory: %d people have %s=%s; taken as none", len(found), attribute, value
        )
    return found[0] if len(found) == 1 else None


def people_with_logins(posix_usernames: Iterable[str]) -> dict[str, DirectoryEntry]:
    """The people with these Unix logins, by login (absent: not in the directory)."""
    names = sorted(set(posix_usernames))
    found: dict[str, DirectoryEntry] = {}
    attribute = settings.LDAP_POSIX_ATTRIBUTE
    for start in range(0, len(names), 200):  # a filter of bounded size per search
        either = "".join(
            f"({attribute}={escape_filter_chars(n)})" for n in names[start : start + 200]
        )
        for entry in _people(f"(|{either})"):
            found[entry.posix_username] = entry
    return found


def groups_of(entry: DirectoryEntry) -> frozenset[str]:
    """The names (cn) of the groups ``entry`` is in, by ``PORTAL_LDAP_GROUP_FILTER``."""
    query = settings.LDAP_GROUP_FILTER.format(
        uid=escape_filter_chars(entry.posix_username), dn=escape_filter_chars(entry.dn)
    )
    return frozenset(
        _first(attrs, "cn") for _, attrs in _search(settings.LDAP_GROUP_BASE, query, ["cn"])
    ) - {""}


def check_bind() -> None:
    """DirectoryUnavailable unless the portal's own bind works (``manage.py check``)."""
    _connect().unbind_s()
