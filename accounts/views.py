"""The researcher's account pages: personal access tokens for the API, preferences, and
members' GPU-hour caps on a project."""

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

from accounts.caps import (
    MAX_CAP_GPU_HOURS,
    allocation_standings,
    cap_change_refusal_of,
    member_cap_clear,
    member_cap_set,
)
from accounts.errors import NotAllowed, Refused, TooManyTokens
from accounts.models import User
from accounts.permissions import is_lead_role, membership_of
from accounts.preferences import mail_language_choices, preferences_update
from accounts.selectors import active_allocations
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


# Members' GPU-hour caps (accounts.caps): the PI's page, where a member sees their own.

EVERY_MEMBER = "*"


class CapForm(forms.Form):
    allocation = forms.TypedChoiceField(label=gettext_lazy("Allocation"), coerce=int)
    member = forms.ChoiceField(label=gettext_lazy("Member"))
    gpu_hours = forms.FloatField(
        label=gettext_lazy("Cap (GPU-hours)"),
        min_value=0,
        max_value=MAX_CAP_GPU_HOURS,
        help_text=gettext_lazy(
            "The most GPU-hours the member may spend of the allocation: used plus held."
        ),
    )

    def __init__(self, *args, allocations, members, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["allocation"]).choices = [
            (a.pk, str(a.cluster)) for a in allocations
        ]
        cast(forms.ChoiceField, self.fields["member"]).choices = [
            (EVERY_MEMBER, _("Every member (the default)"))
        ] + [(m.user.username, m.user.get_full_name() or m.user.username) for m in members]


def _cap_target(project_members: list, member: str) -> User | None:
    if member == EVERY_MEMBER:
        return None
    for membership in project_members:
        if membership.user.username == member:
            return membership.user
    raise Http404("No such member")


@login_required
def project_caps(request: HttpRequest, slug: str) -> HttpResponse:
    """Every member's cap, use and what is left on the project's active allocations; the
    PI and co-PIs set and lift caps here, a member sees their own."""
    user = _user(request)
    membership = membership_of(user, slug)
    if membership is None:
        raise Http404("No such project")
    project = membership.project
    leads = is_lead_role(membership.role)
    allocations = list(
        active_allocations(project).select_related("cluster").order_by("cluster__name")
    )
    members = list(project.memberships.select_related("user").order_by("user__username"))
    form = CapForm(request.POST or None, allocations=allocations, members=members)
    if request.method == "POST":
        if not leads:
            raise Http404("No such form")
        if _cap_change(request, user, form, allocations, members):
            return redirect("project_caps", slug=project.slug)
    views = []
    for allocation in allocations:
        standings = allocation_standings(allocation)
        if not leads:
            standings = [s for s in standings if s.user.pk == user.pk]
        # Read on its own: when every member has their own cap, no standing shows it.
        default = allocation.caps.filter(user__isnull=True).first()
        views.append(
            {
                "allocation": allocation,
                # Why the viewer may not lift each cap shown (their own, a manager's):
                # the page offers no Lift there and says why.
                "rows": [
                    (
                        s,
                        cap_change_refusal_of(user, allocation, s.user, None)
                        if leads and s.is_own_cap
                        else "",
                    )
                    for s in standings
                ],
                "default": default,
                "default_refusal": cap_change_refusal_of(user, allocation, None, None)
                if leads and default
                else "",
            }
        )
    context = {"project": project, "leads": leads, "views": views, "form": form}
    return render(request, "accounts/caps.html", context, status=400 if form.errors else 200)


def _cap_change(request, user: User, form: CapForm, allocations: list, members: list) -> bool:
    """Set (the form) or lift (``lift`` names the member) a cap; True when done."""
    by_id = {allocation.pk: allocation for allocation in allocations}
    try:
        if lift := request.POST.get("lift"):
            allocation = by_id.get(int(request.POST.get("allocation", 0) or 0))
            if allocation is None:
                raise Http404("No such allocation")
            member_cap_clear(actor=user, allocation=allocation, user=_cap_target(members, lift))
            messages.success(request, _("The cap was lifted."))
            return True
        if not form.is_valid():
            return False
        data = form.cleaned_data
        if data["allocation"] not in by_id:
            raise Http404("No such allocation")
        member_cap_set(
            actor=user,
            allocation=by_id[data["allocation"]],
            user=_cap_target(members, data["member"]),
            gpu_hours=data["gpu_hours"],
        )
    except ValueError:
        raise Http404("No such allocation") from None
    except (NotAllowed, Refused) as error:
        form.add_error(None, str(error))
        return False
    messages.success(request, _("The cap was set."))
    return True
