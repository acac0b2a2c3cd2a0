"""The researcher's account pages: personal access tokens for the API, preferences."""

from typing import cast

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accounts.errors import TooManyTokens
from accounts.models import User
from accounts.preferences import mail_language_choices, preferences_update
from accounts.tokens import token_create, token_revoke, tokens_of


class TokenForm(forms.Form):
    name = forms.CharField(
        label=gettext_lazy("Name"),
        max_length=100,
        help_text=gettext_lazy("What the token is for, e.g. “laptop” or “nightly sweep”."),
    )
    expires_in_days = forms.IntegerField(label=gettext_lazy("Valid for (days)"), min_value=1)

    def clean_expires_in_days(self) -> int:
        days = self.cleaned_data["expires_in_days"]
        if days > settings.API_TOKEN_MAX_DAYS:
            raise forms.ValidationError(
                _("A token lasts at most %(days)s days.") % {"days": settings.API_TOKEN_MAX_DAYS}
            )
        return days


def _user(request: HttpRequest) -> User:
    return cast(User, request.user)  # login_required: never anonymous here


@login_required
@never_cache
def tokens(request: HttpRequest) -> HttpResponse:
    """List the user's tokens; a new one's secret is shown on this page once, never again."""
    user = _user(request)
    initial = {"expires_in_days": settings.API_TOKEN_DEFAULT_DAYS}
    form = TokenForm(request.POST or None, initial=initial)
    created = None
    if request.method == "POST" and form.is_valid():
        try:
            token, plain = token_create(
                user=user,
                name=form.cleaned_data["name"],
                expires_in_days=form.cleaned_data["expires_in_days"],
            )
        except TooManyTokens as refusal:
            form.add_error(None, str(refusal))
        else:
            created = {"token": token, "plain": plain}
            form = TokenForm(initial=initial)
    context = {"form": form, "created": created, "tokens": list(tokens_of(user))}
    return render(request, "accounts/tokens.html", context, status=400 if form.errors else 200)


@login_required
@require_POST
def token_revoke_view(request: HttpRequest, token_id: int) -> HttpResponse:
    token = tokens_of(_user(request)).filter(pk=token_id).first()
    if token is None:
        raise Http404("No such token")
    token_revoke(token=token)
    messages.success(request, _("Token “%(name)s” revoked.") % {"name": token.name})
    return redirect("tokens")


class PreferencesForm(forms.Form):
    job_mail = forms.ChoiceField(
        label=gettext_lazy("Mail me when my jobs end"),
        choices=User.JobMail.choices,
        help_text=gettext_lazy(
            "Failed jobs: failed, timed out, out of memory, node failure or preempted (not "
            "cancelled). Jobs that end within a few minutes of each other come in one mail."
        ),
    )
    mail_language = forms.ChoiceField(
        label=gettext_lazy("Language of mails"), choices=mail_language_choices
    )


@login_required
@never_cache
def preferences(request: HttpRequest) -> HttpResponse:
    user = _user(request)
    initial = {
        "job_mail": user.job_mail,
        "mail_language": user.mail_language or request.LANGUAGE_CODE,
    }
    form = PreferencesForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        preferences_update(user=user, **form.cleaned_data)
        messages.success(request, _("Preferences saved."))
        return redirect("preferences")
    context = {"form": form, "email": user.email}
    return render(request, "accounts/preferences.html", context, status=400 if form.errors else 200)
