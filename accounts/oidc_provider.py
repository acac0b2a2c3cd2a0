"""The site's OpenID provider as the portal reads it: its discovery document, its keys
and the tokens it signs, for the browser's sign-in (``accounts.oidc``) and the command
line's (``sgp login --sso``, the device flow, which trades an ID token for a portal
token: ``accounts.api_sign_in``).

The discovery document and the keys are read when first needed and kept an hour, so
the portal starts, and other log-ins work, while the provider is down.

An ID token counts only when the provider's key signed it (its JWKS, read from the
discovery document and kept an hour), it names the configured issuer and, as its
audience, the client that asked for it (the portal's for the browser, the command
line's for ``sgp``), and it has not expired. mozilla-django-oidc checks the signature
alone; the issuer and audience are checked here (OIDC Core 3.1.3.7). A command line's
token is taken once and only while fresh, and the access token that came with it must
answer at the provider's userinfo for the same person.
"""

import contextlib
import hashlib
import logging
import time
from typing import Any

import httpx
import jwt
from django.conf import settings
from django.core.cache import cache
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)

METADATA_KEPT_S = 3600
REQUIRED_ENDPOINTS = ("authorization_endpoint", "token_endpoint", "jwks_uri", "userinfo_endpoint")


class ProviderUnavailable(Exception):
    """The provider's discovery document or keys could not be read, or do not fit."""


def _metadata_key() -> str:
    return f"accounts:oidc:metadata:{settings.OIDC_ISSUER}"


def provider_metadata(*, refresh: bool = False) -> dict[str, Any]:
    """The provider's discovery document (kept an hour in the cache; ``refresh``: read
    again, e.g. for an endpoint the kept one lacks)."""
    cached = None
    if not refresh:
        with contextlib.suppress(RedisError):
            cached = cache.get(_metadata_key())
    if cached:
        return cached
    url = f"{settings.OIDC_ISSUER}/.well-known/openid-configuration"
    try:
        response = httpx.get(url, timeout=settings.OIDC_TIMEOUT)
        response.raise_for_status()
        document = response.json()
    except (httpx.HTTPError, ValueError) as error:
        raise ProviderUnavailable(f"{url}: {error}") from None
    if not isinstance(document, dict) or document.get("issuer") != settings.OIDC_ISSUER:
        said = document.get("issuer") if isinstance(document, dict) else None
        raise ProviderUnavailable(
            f"{url} names the issuer {said!r}, not PORTAL_OIDC_ISSUER={settings.OIDC_ISSUER!r}"
        )
    if missing := [name for name in REQUIRED_ENDPOINTS if not document.get(name)]:
        raise ProviderUnavailable(f"{url} names no {', '.join(missing)}")
    with contextlib.suppress(RedisError):
        cache.set(_metadata_key(), document, timeout=METADATA_KEPT_S)
    return document


JWKS_KEPT_S = 3600
# How old a command line's ID token may be when it is traded (the device flow has just
# finished when sgp sends it), and how long it is remembered as used.
CLI_TOKEN_MAX_AGE_S = 300


class TokenInvalid(Exception):
    """The token is not one the provider issued for this client now; the message says why."""


def _jwks(*, refresh: bool = False) -> dict[str, Any]:
    key = f"accounts:oidc:jwks:{settings.OIDC_ISSUER}"
    if not refresh:
        with contextlib.suppress(RedisError):
            if cached := cache.get(key):
                return cached
    url = provider_metadata()["jwks_uri"]
    try:
        response = httpx.get(url, timeout=settings.OIDC_TIMEOUT)
        response.raise_for_status()
        jwks = response.json()
    except (httpx.HTTPError, ValueError) as error:
        raise ProviderUnavailable(f"{url}: {error}") from None
    with contextlib.suppress(RedisError):
        cache.set(key, jwks, timeout=JWKS_KEPT_S)
    return jwks


def _signing_key(token: str) -> jwt.PyJWK:
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as error:
        raise TokenInvalid(f"not a signed token: {error}") from None
    if header.get("alg") != settings.OIDC_RP_SIGN_ALGO:
        raise TokenInvalid(f"signed with {header.get('alg')!r}, not {settings.OIDC_RP_SIGN_ALGO}")
    for refresh in (False, True):  # a key the provider added since the keys were read
        for key in _jwks(refresh=refresh).get("keys", []):
            if (
                key.get("kid") == header.get("kid")
                and key.get("alg", header["alg"]) == header["alg"]
            ):
                try:
                    return jwt.PyJWK(key)
                except jwt.PyJWTError as error:
                    raise TokenInvalid(f"the provider's key {key.get('kid')!r}: {error}") from None
    raise TokenInvalid(f"no key {header.get('kid')!r} among the provider's")


def verified_id_token(token: str, *, audience: str) -> dict[str, Any]:
    """The claims of ``token`` if the provider signed it for ``audience``; TokenInvalid
    otherwise, ProviderUnavailable when the provider's keys cannot be read."""
    try:
        return jwt.decode(
            token,
            _signing_key(token),
            algorithms=[settings.OIDC_RP_SIGN_ALGO],
            audience=audience,
            issuer=settings.OIDC_ISSUER,
            options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            leeway=30,
        )
    except jwt.PyJWTError as error:
        raise TokenInvalid(str(error)) from None


def cli_claims(*, id_token: str, access_token: str) -> dict[str, Any]:
    """The person a command line's fresh ID token (audience ``PORTAL_OIDC_CLI_CLIENT_ID``)
    and its access token describe; each ID token is taken once."""
    claims = verified_id_token(id_token, audience=settings.OIDC_CLI_CLIENT_ID)
    issued = claims["iat"]
    if not isinstance(issued, int | float) or issued < time.time() - CLI_TOKEN_MAX_AGE_S:
        raise TokenInvalid("the ID token is not fresh: sign in again (sgp login --sso)")
    used = f"accounts:oidc:used:{hashlib.sha256(id_token.encode()).hexdigest()}"
    try:
        first = cache.add(used, 1, timeout=CLI_TOKEN_MAX_AGE_S + 60)
    except RedisError:
        raise ProviderUnavailable("the cache does not answer: cannot tell a replay") from None
    if not first:
        raise TokenInvalid("this ID token was used already: sign in again (sgp login --sso)")
    userinfo = _userinfo(access_token)
    if userinfo.get("sub") != claims["sub"]:
        raise TokenInvalid("the access token is another person's than the ID token")
    return {**claims, **userinfo}


def _userinfo(access_token: str) -> dict[str, Any]:
    url = provider_metadata()["userinfo_endpoint"]
    try:
        response = httpx.get(
            url, headers={"Authorization": f"Bearer {access_token}"}, timeout=settings.OIDC_TIMEOUT
        )
    except httpx.HTTPError as error:
        raise ProviderUnavailable(f"{url}: {error}") from None
    if response.status_code in (400, 401, 403):
        raise TokenInvalid("the provider does not take the access token")
    try:
        response.raise_for_status()
        info = response.json()
    except (httpx.HTTPError, ValueError) as error:
        raise ProviderUnavailable(f"{url}: {error}") from None
    if not isinstance(info, dict):
        raise ProviderUnavailable(f"{url} answered no claims")
    return info
