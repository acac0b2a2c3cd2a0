"""Personal access tokens: made, used and revoked only here.

A token is ``sgp_`` and 43 URL-safe characters (256 random bits). The prefix
makes a leaked token easy to recognise (secret scanners, logs); the portal
keeps only its SHA-256, so the plain token exists once, in the answer to the
request that made it.
"""

import datetime as dt
import hashlib
import re
import secrets

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from accounts.errors import TooManyTokens
from accounts.models import PersonalAccessToken, User

TOKEN_PREFIX = "sgp_"  # noqa: S105 - a marker, not a secret
_TOKEN = re.compile(r"sgp_[A-Za-z0-9_-]{43}")
# How stale last_used_at may get: one write a minute at most, not one per request.
LAST_USED_PRECISION = dt.timedelta(minutes=1)


class TokenRefused(Exception):
    """The token is unknown, expired or revoked, or its user is disabled; the message says which."""


def hash_token(plain: str) -> str:
    return hashlib.sha256(plain.encode()).hexdigest()


def token_create(
    *, user: User, name: str, expires_in_days: int | None = None
) -> tuple[PersonalAccessToken, str]:
    """A new token for ``user``, and its plain text — shown once, never stored.

    TooManyTokens when the user already has ``API_MAX_TOKENS_PER_USER`` live ones.
    """
    days = settings.API_TOKEN_DEFAULT_DAYS if expires_in_days is None else expires_in_days
    if not 1 <= days <= settings.API_TOKEN_MAX_DAYS:
        raise ValueError(f"A token lasts 1 to {settings.API_TOKEN_MAX_DAYS} days.")
    plain = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        # The user's row is the lock: of two concurrent creations, the second counts
        # after the first has committed, so together they cannot pass the cap.
        User.objects.select_for_update().filter(pk=user.pk).values_list("pk").get()
        limit = settings.API_MAX_TOKENS_PER_USER
        if active_tokens_of(user).count() >= limit:
            raise TooManyTokens(limit=limit)
        token = PersonalAccessToken.objects.create(
            user=user,
            name=name.strip(),
            prefix=plain[:12],
            token_hash=hash_token(plain),
            expires_at=timezone.now() + dt.timedelta(days=days),
        )
    return token, plain


def token_revoke(*, token: PersonalAccessToken) -> PersonalAccessToken:
    """Revoke the token from now on; a repeat keeps the first revocation time."""
    PersonalAccessToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    token.refresh_from_db(fields=["revoked_at"])
    return token


def token_authenticate(plain: str) -> PersonalAccessToken:
    """The live token ``plain`` names, with its user; TokenRefused saying why not."""
    if not _TOKEN.fullmatch(plain):
        raise TokenRefused("This is not a portal access token (they start with sgp_).")
    try:
        token = PersonalAccessToken.objects.select_related("user").get(token_hash=hash_token(plain))
    except PersonalAccessToken.DoesNotExist:
        raise TokenRefused("This access token is not known; it may have been deleted.") from None
    now = timezone.now()
    if token.revoked_at is not None:
        raise TokenRefused("This access token has been revoked; create a new one.")
    if token.expires_at <= now:
        raise TokenRefused("This access token has expired; create a new one.")
    if not token.user.is_active:
        raise TokenRefused("The account of this access token is disabled.")
    stale = now - LAST_USED_PRECISION
    if token.last_used_at is None or token.last_used_at < stale:
        # Conditional: of concurrent requests with the same token, one writes.
        PersonalAccessToken.objects.filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lt=stale), pk=token.pk
        ).update(last_used_at=now)
        token.last_used_at = now
    return token


def tokens_of(user: User) -> QuerySet[PersonalAccessToken]:
    return PersonalAccessToken.objects.filter(user=user).order_by("-created_at", "-id")


def active_tokens_of(user: User) -> QuerySet[PersonalAccessToken]:
    """The user's tokens that still work: neither revoked nor expired (what the cap counts)."""
    return tokens_of(user).filter(revoked_at__isnull=True, expires_at__gt=timezone.now())
