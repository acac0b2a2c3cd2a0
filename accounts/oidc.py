"""Sign-in with the site's OpenID Connect provider: mozilla-django-oidc, authorization
code with PKCE (S256), the ID token checked against the provider's keys (RS256).

The operator names the provider's issuer (``PORTAL_OIDC_ISSUER``); its endpoints come
from its discovery document, read when first needed and kept an hour, so the portal
starts, and local or directory log-ins work, while the provider is down. Users are
matched by the provider's ``sub`` (``ExternalIdentity``), never by e-mail or the name
they typed; ``accounts.identity.sign_in`` does the rest, as for the directory.
"""

import logging
from typing import Any

import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.translation import gettext as _
from django.views import View
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from accounts.identity import Claim, Person, SignInRefused, directory_match, sign_in
from accounts.models import ExternalIdentity, User
from accounts.oidc_provider import (
    ProviderUnavailable,
    TokenInvalid,
    provider_metadata,
    verified_id_token,
)

logger = logging.getLogger(__name__)


def _unavailable(request: HttpRequest, error: Exception) -> None:
    logger.warning("sign-in with %s failed: %s", settings.OIDC_ISSUER, error)
    messages.error(
        request,
        _("Signing in with %(name)s is not possible right now; try again later.")
        % {"name": settings.OIDC_NAME},
    )


def person_from_claims(
    claims: dict[str, Any], *, scopes_not_granted: frozenset[str] = frozenset()
) -> Person:
    """The person the provider's claims describe; ``sub`` is who they are. An e-mail
    address the provider has not verified is not taken as theirs."""

    def text(name: str) -> str:
        value = claims.get(name)
        return value.strip() if isinstance(value, str) else ""

    match = directory_match()
    groups = claims.get(settings.OIDC_GROUPS_CLAIM)
    return Person(
        source=ExternalIdentity.Source.OIDC,
        issuer=settings.OIDC_ISSUER,
        subject=text("sub"),
        login=text("preferred_username") or text("email") or text("sub"),
        posix_username=text(settings.OIDC_POSIX_CLAIM),
        email=text("email") if claim_verified(claims, "email") else "",
        first_name=text("given_name"),
        last_name=text("family_name"),
        groups=(
            frozenset(g for g in groups if isinstance(g, str)) if isinstance(groups, list) else None
        ),
        directory_key=(
            Claim(name=match[0], value=text(match[0]), verified=claim_verified(claims, match[0]))
            if match
            else None
        ),
        scopes_not_granted=scopes_not_granted,
    )


def claim_verified(claims: dict[str, Any], name: str) -> bool:
    """False when the provider says it has not verified claim ``name``
    (``<name>_verified``: OIDC Core's ``email_verified``, ``phone_number_verified``); a
    provider that says nothing of it vouches for what it sends."""
    said = claims.get(f"{name}_verified", True)
    # Some providers write the boolean as a string.
    return said is True or (isinstance(said, str) and said.strip().lower() == "true")


def scopes_not_granted(granted: object) -> frozenset[str]:
    """The scopes the portal asks for (``PORTAL_OIDC_SCOPES``) that the provider's token
    answer says it did not grant; an answer without ``scope`` granted what was asked
    (RFC 6749 5.1), and then the claims alone decide."""
    asked = frozenset(settings.OIDC_RP_SCOPES.split())
    if granted is None:
        return frozenset()
    return asked - frozenset(granted.split() if isinstance(granted, str) else ())


class ProviderBackend(OIDCAuthenticationBackend):
    """Only the code-flow callback reaches it (a request with ``code_verifier``); the
    endpoints are the discovery document's, read then."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Not the parent's: it would need every endpoint as a setting now, while the
        # provider is asked only when someone signs in through it.
        ModelBackend.__init__(self)
        self.UserModel = User
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None
        self.scopes_not_granted: frozenset[str] = frozenset()  # get_token's, per sign-in

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> User | None:
        if request is None or "code_verifier" not in kwargs:
            return None  # a password log-in, or another backend's
        try:
            metadata = provider_metadata()
            self.OIDC_OP_TOKEN_ENDPOINT = metadata["token_endpoint"]
            self.OIDC_OP_USER_ENDPOINT = metadata["userinfo_endpoint"]
            return super().authenticate(request, **kwargs)
        except requests.HTTPError as error:
            if error.response is None or error.response.status_code >= 500:
                _unavailable(request, error)
            else:  # the provider refused the code: used, expired, or never its own
                logger.warning("sign-in with %s refused: %s", settings.OIDC_ISSUER, error)
                messages.error(request, _("The sign-in could not be verified; try again."))
        except (ProviderUnavailable, requests.RequestException) as error:
            _unavailable(request, error)
        except SuspiciousOperation as error:  # a token that does not verify
            logger.warning("sign-in with %s refused: %s", settings.OIDC_ISSUER, error)
            messages.error(request, _("The sign-in could not be verified; try again."))
        except SignInRefused as refusal:
            messages.error(request, refusal.message)
        return None

    def get_token(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The provider's answer to the code, and what it says it granted (its ``scope``):
        the browser carried the request there, and may have cut it down."""
        answer = super().get_token(payload)
        self.scopes_not_granted = scopes_not_granted(answer.get("scope"))
        return answer

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        """The ID token's claims: signed by the provider's key, for the portal's client
        and by the configured issuer (the parent checks the signature alone), with this
        sign-in's nonce."""
        try:
            payload = verified_id_token(token, audience=self.OIDC_RP_CLIENT_ID)
        except TokenInvalid as error:
            raise SuspiciousOperation(f"the ID token: {error}") from None
        if payload.get("nonce") != kwargs.get("nonce"):
            raise SuspiciousOperation("the ID token's nonce is not this sign-in's")
        return payload

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict) -> User:
        claims = {**payload, **self.get_userinfo(access_token, id_token, payload)}
        if claims.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("the userinfo answer is about another subject")
        return sign_in(person_from_claims(claims, scopes_not_granted=self.scopes_not_granted))

    def get_user(self, user_id: Any) -> User | None:
        """The session's user while they may still use the portal (switched-off: none)."""
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None


class SignInStart(OIDCAuthenticationRequestView):
    """``/oidc/start/``: off to the provider's log-in page, with state, nonce and PKCE."""

    def __init__(self, **kwargs: Any) -> None:
        View.__init__(self, **kwargs)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID

    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.OIDC_ISSUER:
            raise Http404("No identity provider is configured (PORTAL_OIDC_ISSUER).")
        try:
            self.OIDC_OP_AUTH_ENDPOINT = provider_metadata()["authorization_endpoint"]
        except ProviderUnavailable as error:
            _unavailable(request, error)
            return redirect("login")
        return super().get(request)


class SignInCallback(OIDCAuthenticationCallbackView):
    """``/oidc/callback/``: the provider sends the browser back here with a code.

    Whatever the query string, the answer is the page the sign-in leads to or the log-in
    page with a message: a state this browser never started (an old tab, a forged link)
    or an error from the provider ends here, before the provider is asked anything. An
    error does not log out whoever is signed in (the parent's habit): the link is a GET
    that anyone can send."""

    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.OIDC_ISSUER:
            raise Http404("No identity provider is configured (PORTAL_OIDC_ISSUER).")
        pending = request.session.get("oidc_states")
        if not isinstance(pending, dict):
            pending = {}
        state = request.GET.get("state", "")
        known = state in pending
        if error := request.GET.get("error"):
            if known:  # that sign-in is over: its state may not be used again
                del pending[state]
                request.session.modified = True
            logger.info("sign-in with %s ended there: %.100r", settings.OIDC_ISSUER, error)
            return self._back_to_login(
                _("Signing in was cancelled or refused at %(name)s.") % {"name": settings.OIDC_NAME}
            )
        if not known or not request.GET.get("code"):
            logger.warning("sign-in callback refused: no code, or a state this browser never had")
            return self._back_to_login(
                _("This sign-in link has expired or was used; sign in again.")
            )
        # RFC 9207: a provider that names itself must be ours (a mix-up otherwise).
        if request.GET.get("iss", settings.OIDC_ISSUER) != settings.OIDC_ISSUER:
            del pending[state]
            request.session.modified = True
            logger.warning(
                "sign-in callback refused: from issuer %.100r, not %r",
                request.GET["iss"],
                settings.OIDC_ISSUER,
            )
            return self._back_to_login(_("The sign-in could not be verified; try again."))
        return super().get(request)

    def login_failure(self) -> HttpResponse:
        # The backend says why when it knows (accounts.identity, the provider's answer).
        if not len(messages.get_messages(self.request)):
            messages.error(self.request, _("Signing in did not finish; try again."))
        return super().login_failure()

    def _back_to_login(self, message: str) -> HttpResponse:
        messages.error(self.request, message)
        return redirect("login")
