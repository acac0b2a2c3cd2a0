"""How the REST API knows who calls: bearer tokens for scripts, and their rate limits."""

import logging

from django.conf import settings
from redis.exceptions import RedisError
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from accounts.models import PersonalAccessToken, User
from accounts.tokens import TokenRefused, token_authenticate
from audit.log_context import log_context_bind

logger = logging.getLogger(__name__)


class BearerTokenAuthentication(BaseAuthentication):
    """``Authorization: Bearer sgp_…``. A request that sends one and fails is refused
    (401), never retried as another scheme: a script with a dead token must hear so."""

    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[User, PersonalAccessToken] | None:
        header = get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(
                "Send the token as `Authorization: Bearer <token>`, with no spaces in the token."
            )
        try:
            plain = header[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed(
                "This is not a portal access token (they start with sgp_)."
            ) from None
        try:
            token = token_authenticate(plain)
        except TokenRefused as refusal:
            raise exceptions.AuthenticationFailed(str(refusal)) from None
        # For the rest of the request's log lines (portal/logs.py clears them after it).
        log_context_bind(user=token.user.get_username())
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return f'{self.keyword} realm="api"'


class TokenRateThrottle(SimpleRateThrottle):
    """Requests per user, however they call: all of a user's tokens and browser sessions
    share one budget (a new token is no new budget); per client address without
    credentials.

    The rates are read when a request comes, not when DRF is imported, so
    ``PORTAL_API_RATE`` and ``PORTAL_API_ANON_RATE`` (and tests) set them.
    """

    scope = "api"

    def __init__(self) -> None:
        # SimpleRateThrottle reads the rate in __init__; the rate depends on the
        # request here, so it is read in allow_request.
        pass

    def allow_request(self, request, view) -> bool:
        authenticated = bool(request.user and request.user.is_authenticated)
        self.rate = settings.API_RATE if authenticated else settings.API_ANON_RATE
        if self.rate is None:
            return True
        self.num_requests, self.duration = self.parse_rate(self.rate)
        try:
            return super().allow_request(request, view)
        except RedisError as error:
            # The counts live in Redis; while it is down the API stays up, unlimited,
            # as the rest of the portal does (jobs are saved and submitted later).
            logger.warning("rate limits off: the cache does not answer (%s)", error)
            return True

    def get_cache_key(self, request, view) -> str:
        if request.user and request.user.is_authenticated:
            ident = f"user:{request.user.pk}"
        else:
            ident = f"address:{self.get_ident(request)}"
        return f"throttle:{self.scope}:{ident}"
