"""The web and admin log-in forms with the brute-force throttle, and the HTTP 429 they answer.

portal/urls.py wires them: ``/login/`` is ``login_view``, and the admin site uses
``AdminLoginForm`` through ``with_throttle_status(admin.site.login)``.
"""

import math
from collections.abc import Callable
from functools import wraps
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponseBase
from django.utils import formats, timezone
from django.utils.translation import ngettext

from accounts.identity import SignInRefused
from accounts.login_throttle import (
    Lockout,
    client_address,
    login_failed,
    login_lockout,
    login_succeeded,
)


def lockout_message(lockout: Lockout) -> str:
    minutes = math.ceil(lockout.retry_after_s / 60)
    until = timezone.localtime(lockout.until)
    at = f"{formats.time_format(until, 'TIME_FORMAT')} {until.tzname()}"
    return ngettext(
        "Too many failed attempts to log in. Try again in %(minutes)s minute (at %(time)s).",
        "Too many failed attempts to log in. Try again in %(minutes)s minutes (at %(time)s).",
        minutes,
    ) % {"minutes": minutes, "time": at}


class LoginForm(AuthenticationForm):
    """Refused without checking the password while the user name at this address, or the
    address, is locked."""

    # Set when this attempt was refused by the throttle: the view answers 429.
    lockout: Lockout | None = None

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if self.request is None or not username or not password:
            return super().clean()  # field errors only: nothing was tried
        address = client_address(self.request)
        self.lockout = login_lockout(username=username, address=address)
        if self.lockout:
            raise forms.ValidationError(lockout_message(self.lockout), code="throttled")
        try:
            cleaned = super().clean()
        except forms.ValidationError:
            login_failed(username=username, address=address)
            raise
        except SignInRefused as refusal:
            # The password was right; the directory or a worker says no (identity.py).
            raise forms.ValidationError(refusal.message, code="refused") from None
        login_succeeded(username=username, address=address)
        return cleaned


class AdminLoginForm(LoginForm, AdminAuthenticationForm):
    """The admin's form (staff only, its own message) with the same throttle and counts."""


def with_throttle_status(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """HTTP 429 with Retry-After when the log-in form on the page was refused by the throttle."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        response = view(request, *args, **kwargs)
        context = getattr(response, "context_data", None) or {}
        lockout = getattr(context.get("form"), "lockout", None)
        if isinstance(lockout, Lockout):
            response.status_code = 429
            response["Retry-After"] = str(lockout.retry_after_s)
        return response

    return wrapped


class PortalLoginView(LoginView):
    """The password form, and a "Log in with …" button when a provider is configured."""

    authentication_form = LoginForm
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        provider = settings.OIDC_NAME if settings.OIDC_ISSUER else None
        return {**super().get_context_data(**kwargs), "sign_in_provider": provider}


login_view = with_throttle_status(PortalLoginView.as_view())
