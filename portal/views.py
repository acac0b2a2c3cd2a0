"""The portal's own pages: the dashboard, a project's page, and the health check."""

from dataclasses import dataclass
from typing import cast

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from accounts.caps import member_standings
from accounts.errors import NotAllowed, Refused
from accounts.fair_share import project_standings
from accounts.models import Allocation, Project, User
from accounts.permissions import is_lead_role, membership_of
from accounts.requests import allocation_request_create
from accounts.selectors import (
    Balance,
    allocation_balance,
    allocation_daily_usage,
    is_in_force,
    is_upcoming,
    memberships_of_user,
    project_balance,
    project_usage,
    project_usage_by_month_and_user,
)
from accounts.usage import usage_chart
from clusters.selectors import clusters_enabled
from jobs.selectors import own_jobs, project_jobs, unsuccessful_charges
from jobs.states import TERMINAL_STATES
from portal.charts import BurnDown, burn_down
from portal.health import health_report
from portal.security import bearer_token_matches

RECENT_JOBS = 10


def _user(request: HttpRequest) -> User:
    return cast(User, request.user)  # login_required: never anonymous here


@require_GET
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    """200 or 503 with the verdict for anyone (a load balancer); the report behind it
    for staff and for a monitoring system that sends ``PORTAL_HEALTH_TOKEN``."""
    healthy, report = health_report()
    body: dict = {"status": "ok" if healthy else "unavailable"}
    if _may_see_health_detail(request):
        body.update(report)
    return JsonResponse(body, status=200 if healthy else 503)


def _may_see_health_detail(request: HttpRequest) -> bool:
    if request.user.is_authenticated and request.user.is_staff:
        return True
    return bearer_token_matches(request, settings.HEALTH_TOKEN)


@dataclass(frozen=True)
class AllocationView:
    allocation: Allocation
    balance: Balance
    chart: BurnDown


def _allocation_views(allocations) -> list[AllocationView]:
    today = timezone.localdate()
    views = []
    for allocation in allocations:
        balance = allocation_balance(allocation)
        views.append(
            AllocationView(
                allocation=allocation,
                balance=balance,
                chart=burn_down(
                    granted_gpu_seconds=balance.granted_gpu_seconds,
                    available_gpu_seconds=balance.available_gpu_seconds,
                    daily_used_gpu_seconds=allocation_daily_usage(allocation),
                    starts_on=allocation.starts_on,
                    ends_on=allocation.ends_on,
                    today=today,
                ),
            )
        )
    return views


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """The dashboard: each project's balance and burn-down, my queued and recent jobs."""
    user = _user(request)
    memberships = list(memberships_of_user(user))
    today = timezone.localdate()
    projects = [
        {
            "membership": membership,
            "project": membership.project,
            # In force first, the soonest to end first; those granted for a later period
            # after them, saying when they start (nothing of them is available yet).
            "allocations": _allocation_views(
                sorted(
                    (a for a in membership.project.allocations.all() if is_in_force(a, on=today)),
                    key=lambda a: (a.ends_on, a.cluster.name),
                )
            ),
            "upcoming": sorted(
                (a for a in membership.project.allocations.all() if is_upcoming(a, on=today)),
                key=lambda a: (a.starts_on, a.cluster.name),
            ),
        }
        for membership in memberships
    ]
    mine = own_jobs(user)
    context = {
        "projects": projects,
        "active_jobs": list(mine.exclude(state__in=TERMINAL_STATES)[:50]),
        "recent_jobs": list(mine.filter(state__in=TERMINAL_STATES)[:RECENT_JOBS]),
    }
    return render(request, "portal/home.html", context)


class AllocationRequestForm(forms.Form):
    cluster = forms.ModelChoiceField(label=gettext_lazy("Cluster"), queryset=clusters_enabled())
    gpu_hours = forms.IntegerField(label=gettext_lazy("GPU-hours"), min_value=1)
    starts_on = forms.DateField(
        label=gettext_lazy("From"), widget=forms.DateInput(attrs={"type": "date"})
    )
    ends_on = forms.DateField(
        label=gettext_lazy("Until"), widget=forms.DateInput(attrs={"type": "date"})
    )
    justification = forms.CharField(
        label=gettext_lazy("Why the project needs them"),
        widget=forms.Textarea(attrs={"rows": 3}),
    )


def _my_caps(user: User, allocations: list[Allocation]) -> list[dict]:
    """The user's own caps on the project's allocations in force, with what is left."""
    rows = []
    for allocation in allocations:
        if not is_in_force(allocation):
            continue
        [standing] = member_standings(allocation, [user])
        if standing.cap is not None:
            rows.append(
                {
                    "cluster": allocation.cluster,
                    "cap_gpu_seconds": standing.cap.gpu_seconds,
                    "remaining_gpu_seconds": standing.remaining_gpu_seconds,
                }
            )
    return rows


@login_required
def project_detail(request: HttpRequest, slug: str) -> HttpResponse:
    """A project: balance for every member; members, usage and all jobs for PI and co-PIs."""
    user = _user(request)
    membership = membership_of(user, slug)
    if membership is None:
        raise Http404("No such project")
    project: Project = membership.project
    leads = is_lead_role(membership.role)
    form = AllocationRequestForm(request.POST or None) if leads else None
    if request.method == "POST":
        if form is None:
            raise Http404("No such form")
        if form.is_valid():
            try:
                allocation_request_create(project=project, requested_by=user, **form.cleaned_data)
            except (NotAllowed, Refused) as error:
                form.add_error(None, str(error))
            except ValidationError as error:
                errors = (
                    error.message_dict if hasattr(error, "error_dict") else {None: error.messages}
                )
                for field, field_messages in errors.items():
                    form.add_error(field if field in form.fields else None, field_messages)
            else:
                messages.success(request, _("Your request was sent to the allocation managers."))
                return redirect("project", slug=project.slug)
    jobs = project_jobs(user, project, leads=leads)
    allocations = list(project.allocations.select_related("cluster").order_by("-starts_on"))
    today = timezone.localdate()
    in_force = [a for a in allocations if is_in_force(a, on=today)]
    context = {
        "project": project,
        "membership": membership,
        "leads": leads,
        "balance": project_balance(project),
        "allocations": _allocation_views(in_force),
        # Granted for a later period: shown with the day they start, in no figure.
        "upcoming": sorted(
            (a for a in allocations if is_upcoming(a, on=today)), key=lambda a: a.starts_on
        ),
        # (allocation, GPU-seconds, jobs) of the jobs that failed, were cancelled or timed out.
        "unsuccessful": [(a, *unsuccessful_charges(a)) for a in in_force],
        "jobs": list(jobs[:25]),
        "form": form,
        "standings": project_standings(project),
        "my_caps": _my_caps(user, allocations),
    }
    if leads:
        context["members"] = list(
            project.memberships.select_related("user").order_by("role", "user__username")
        )
        context["usage_by_user"] = project_usage(project, group_by="user")
        context["chart"] = usage_chart(project_usage_by_month_and_user(project))
        context["requests"] = list(project.requests.order_by("-created_at")[:10])
    return render(
        request, "portal/project.html", context, status=400 if form and form.errors else 200
    )
