import csv
import datetime as dt
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, F, OuterRef, QuerySet, Subquery, Sum
from django.http import Http404, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from accounts.errors import AllocationOverlap, NotAllowed
from accounts.ledger import allocation_adjust, allocation_grant
from accounts.models import (
    Allocation,
    AllocationRequest,
    LedgerEntry,
    Membership,
    Notification,
    Project,
    User,
)
from accounts.reconcile import reconcile
from accounts.requests import allocation_request_approve, allocation_request_deny
from accounts.selectors import (
    MonthlyUsage,
    allocation_balance,
    charges_of_projects,
    project_active_allocations,
    project_balance,
    project_usage,
    project_usage_by_month_and_user,
    usage_by_month_and_user,
)
from clusters.selectors import clusters_enabled


@admin.register(User)
class UserAdmin(DjangoUserAdmin):
    list_display = ["username", "posix_username", "email", "is_staff", "is_active"]
    search_fields = ["username", "posix_username", "email", "first_name", "last_name"]
    fieldsets = (
        *(DjangoUserAdmin.fieldsets or ()),
        ("Slurm", {"fields": ["posix_username"]}),
    )


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    raw_id_fields = ["user"]


class AllocationInline(admin.TabularInline):
    model = Allocation
    extra = 0
    fields = ["cluster", "state", "starts_on", "ends_on", "granted_gpu_seconds"]
    readonly_fields = ["cluster", "state", "starts_on", "ends_on", "granted_gpu_seconds"]
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False


class GrantForm(forms.ModelForm):
    """Adding an allocation in the console grants its hours through the ledger."""

    gpu_hours = forms.IntegerField(min_value=1, label="GPU-hours")
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}))

    class Meta:
        model = Allocation
        fields = ["project", "cluster", "starts_on", "ends_on"]


class AdjustForm(forms.Form):
    gpu_hours = forms.DecimalField(
        max_digits=12, decimal_places=2, label="GPU-hours to add (negative to take away)"
    )
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}))


def hours(seconds: int) -> str:
    return f"{seconds / 3600:,.1f}"


NO_USER = "(no portal user)"  # charges of work outside the portal, or of a deleted user
NO_PARTITION = "(unknown partition)"
# Okabe-Ito: told apart by colour-blind readers too; the eighth colour is "others".
SERIES_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442")
OTHERS_COLOUR = "#8C8C8C"


@dataclass(frozen=True)
class Series:
    name: str
    colour: str


@dataclass(frozen=True)
class MonthRow:
    month: str  # "2026-11"
    gpu_hours: list[float]  # one per series
    total: float


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    colour: str
    title: str


@dataclass(frozen=True)
class Tick:
    at: float
    label: str


# The chart's frame in SVG user units; it scales to the page's width.
CHART_WIDTH, CHART_HEIGHT = 720, 300
PLOT_LEFT, PLOT_RIGHT, PLOT_TOP, PLOT_BOTTOM = 64, 712, 12, 256


@dataclass(frozen=True)
class UsageChart:
    """GPU-hours per month stacked by user: the numbers, and the SVG drawn from them."""

    series: list[Series]
    rows: list[MonthRow]
    totals: list[float]  # one per series
    bars: list[Bar]
    y_ticks: list[Tick]
    x_labels: list[Tick]
    width: int = CHART_WIDTH
    height: int = CHART_HEIGHT
    left: int = PLOT_LEFT
    right: int = PLOT_RIGHT
    top: int = PLOT_TOP
    bottom: int = PLOT_BOTTOM

    @property
    def total(self) -> float:
        return sum(self.totals)

    @property
    def first_month(self) -> str:
        return self.rows[0].month if self.rows else ""

    @property
    def last_month(self) -> str:
        return self.rows[-1].month if self.rows else ""


def _month_label(month: dt.date) -> str:
    return f"{month:%Y-%m}"


def _months_from(first: dt.date, last: dt.date) -> list[dt.date]:
    months, month = [], first
    while month <= last:
        months.append(month)
        month = (month.replace(day=28) + dt.timedelta(days=4)).replace(day=1)
    return months


def _nice_ceiling(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten at or above the value."""
    if value <= 0:
        return 1.0
    magnitude = 10.0 ** math.floor(math.log10(value))
    return next(step * magnitude for step in (1, 2, 2.5, 5, 10) if step * magnitude >= value)


def _stack(usage: list[MonthlyUsage], max_series: int) -> tuple[list[Series], list[MonthRow]]:
    """Each month's GPU-hours by user, the largest users first and the rest as "others",
    with every month between the first and the last so that gaps show."""
    per_user: dict[str, float] = defaultdict(float)
    for cell in usage:
        per_user[cell.username or NO_USER] += cell.gpu_hours
    ranked = sorted(per_user, key=lambda name: (-per_user[name], name))
    shown = ranked if len(ranked) <= max_series else ranked[: max_series - 1]
    series = [Series(name, colour) for name, colour in zip(shown, SERIES_COLOURS, strict=False)]
    if len(shown) < len(ranked):
        series.append(Series(f"{len(ranked) - len(shown)} others", OTHERS_COLOUR))
    column = {name: index for index, name in enumerate(shown)}
    months = _months_from(usage[0].month, usage[-1].month) if usage else []
    grid = {month: [0.0] * len(series) for month in months}
    for cell in usage:
        grid[cell.month][column.get(cell.username or NO_USER, len(series) - 1)] += cell.gpu_hours
    return series, [MonthRow(_month_label(m), grid[m], sum(grid[m])) for m in months]


def usage_chart(usage: list[MonthlyUsage], *, max_series: int = len(SERIES_COLOURS)) -> UsageChart:
    """The chart of one project's usage (rows in month order, as the selector gives them)."""
    series, rows = _stack(usage, max_series)
    ceiling = _nice_ceiling(max((row.total for row in rows), default=0))
    scale = (PLOT_BOTTOM - PLOT_TOP) / ceiling
    slot = (PLOT_RIGHT - PLOT_LEFT) / max(len(rows), 1)
    bar_width = min(slot * 0.7, 56)
    label_every = math.ceil(len(rows) / 12) or 1
    bars, x_labels = [], []
    for index, row in enumerate(rows):
        x = PLOT_LEFT + index * slot + (slot - bar_width) / 2
        stacked = 0.0
        for one, used in zip(series, row.gpu_hours, strict=True):
            if used <= 0:
                continue
            bars.append(
                Bar(
                    x=round(x, 1),
                    y=round(PLOT_BOTTOM - (stacked + used) * scale, 1),
                    width=round(bar_width, 1),
                    height=round(used * scale, 1),
                    colour=one.colour,
                    title=f"{one.name}, {row.month}: {used:,.2f} GPU-h",
                )
            )
            stacked += used
        if index % label_every == 0:
            x_labels.append(Tick(round(x + bar_width / 2, 1), row.month))
    y_ticks = [
        Tick(round(PLOT_BOTTOM - ceiling * step / 4 * scale, 1), f"{ceiling * step / 4:,g}")
        for step in range(5)
    ]
    return UsageChart(
        series=series,
        rows=rows,
        totals=[sum(row.gpu_hours[i] for row in rows) for i in range(len(series))],
        bars=bars,
        y_ticks=y_ticks,
        x_labels=x_labels,
    )


class _Echo:
    """A file-like object for csv.writer that hands each line back instead of storing it."""

    def write(self, value: str) -> str:
        return value


def _text(value: str | None) -> str:
    # A cell starting with = + - @ is a formula to a spreadsheet: keep it text.
    value = value or ""
    return f"'{value}" if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def _csv_response(
    filename: str, header: list[str], rows: Iterable[list[str]]
) -> StreamingHttpResponse:
    writer = csv.writer(_Echo())

    def lines() -> Iterator[str]:
        yield writer.writerow(header)
        for row in rows:
            yield writer.writerow(row)

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


CHARGES_HEADER = [
    "charged_at",
    "user",
    "cluster",
    "partition",
    "reference",
    "gpu_hours",
    "gpu_seconds",
]
MONTHLY_HEADER = ["project", "month", "user", "gpu_hours", "gpu_seconds"]


def _charge_rows(charges: QuerySet[LedgerEntry]) -> Iterator[list[str]]:
    # iterator(): a server-side cursor, so a project with a million charges streams.
    for entry in charges.iterator(chunk_size=2000):
        used = -entry.gpu_seconds
        yield [
            timezone.localtime(entry.created_at).isoformat(timespec="seconds"),
            _text(entry.user.username if entry.user else ""),
            _text(entry.allocation.cluster.name),
            _text(entry.partition.name if entry.partition else ""),
            _text(entry.reference),
            f"{used / 3600:.4f}",
            str(used),
        ]


def _monthly_rows(usage: Iterable[MonthlyUsage]) -> Iterator[list[str]]:
    for cell in usage:
        yield [
            cell.project,
            _month_label(cell.month),
            _text(cell.username),
            f"{cell.gpu_hours:.4f}",
            str(cell.gpu_seconds),
        ]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "slurm_account", "members", "available", "usage_link"]
    search_fields = ["name", "slug", "slurm_account"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline, AllocationInline]
    actions = ["export_usage_csv"]

    def get_queryset(self, request):
        active = (
            Allocation.objects.filter(project=OuterRef("pk"), state=Allocation.State.ACTIVE)
            .values("project")
            .annotate(
                seconds=Sum(
                    F("granted_gpu_seconds")
                    - F("used_gpu_seconds")
                    - F("held_gpu_seconds")
                    - F("expired_gpu_seconds")
                )
            )
            .values("seconds")
        )
        members = (
            Membership.objects.filter(project=OuterRef("pk"))
            .values("project")
            .annotate(count=Count("pk"))
            .values("count")
        )
        # Subqueries, not joins: summing allocations over a join with memberships
        # would count each allocation once per member.
        return (
            super()
            .get_queryset(request)
            .annotate(available_seconds=Subquery(active), member_count=Subquery(members))
        )

    @admin.display(description="members")
    def members(self, project: Project) -> int:
        return project.member_count or 0  # type: ignore[attr-defined]

    @admin.display(description="available GPU-h (active allocations)")
    def available(self, project: Project) -> str:
        return hours(project.available_seconds or 0)  # type: ignore[attr-defined]

    @admin.display(description="usage")
    def usage_link(self, project: Project) -> str:
        return format_html(
            '<a href="{}">Usage</a>', reverse("admin:accounts_project_usage", args=[project.pk])
        )

    def get_urls(self):
        return [
            path(
                "<int:project_id>/usage/",
                self.admin_site.admin_view(self.usage_view),
                name="accounts_project_usage",
            ),
            path(
                "<int:project_id>/usage/charges.csv",
                self.admin_site.admin_view(self.charges_csv_view),
                name="accounts_project_usage_charges",
            ),
            path(
                "<int:project_id>/usage/monthly.csv",
                self.admin_site.admin_view(self.monthly_csv_view),
                name="accounts_project_usage_monthly",
            ),
            *super().get_urls(),
        ]

    def _viewable(self, request, project_id: int) -> Project:
        project = self.get_object(request, str(project_id))
        if project is None:
            raise Http404
        if not self.has_view_permission(request, project):
            raise PermissionDenied
        return project

    def usage_view(self, request, project_id: int):
        """The project's balance, GPU-hours per month and user, by user and by partition."""
        project = self._viewable(request, project_id)
        allocations = [
            (allocation, allocation_balance(allocation))
            for allocation in project_active_allocations(project)
        ]
        context = {
            **self.admin_site.each_context(request),
            "title": f"Usage of {project}",
            "project": project,
            "opts": self.model._meta,
            "allocations": allocations,
            "balance": project_balance(project),
            "chart": usage_chart(project_usage_by_month_and_user(project)),
            "by_user": [
                (name or NO_USER, used) for name, used in project_usage(project, group_by="user")
            ],
            "by_partition": [
                (name or NO_PARTITION, used)
                for name, used in project_usage(project, group_by="partition")
            ],
        }
        return render(request, "admin/accounts/project/usage.html", context)

    def charges_csv_view(self, request, project_id: int) -> StreamingHttpResponse:
        """One row per charge of the project, oldest first."""
        project = self._viewable(request, project_id)
        charges = charges_of_projects(Project.objects.filter(pk=project.pk))
        return _csv_response(f"{project.slug}-charges.csv", CHARGES_HEADER, _charge_rows(charges))

    def monthly_csv_view(self, request, project_id: int) -> StreamingHttpResponse:
        project = self._viewable(request, project_id)
        usage = usage_by_month_and_user(Project.objects.filter(pk=project.pk))
        return _csv_response(f"{project.slug}-usage.csv", MONTHLY_HEADER, _monthly_rows(usage))

    @admin.action(
        description="Export usage as CSV (GPU-hours per month and user)", permissions=["view"]
    )
    def export_usage_csv(self, request, queryset):
        filename = f"usage-{timezone.localdate():%Y-%m-%d}.csv"
        usage = usage_by_month_and_user(queryset)
        return _csv_response(filename, MONTHLY_HEADER, _monthly_rows(usage))


ALLOCATION_COLUMNS = (
    "project",
    "cluster",
    "state",
    "starts_on",
    "ends_on",
    "granted",
    "used",
    "held",
    "available",
)


@admin.register(Allocation)
class AllocationAdmin(admin.ModelAdmin):
    list_display = ALLOCATION_COLUMNS
    list_filter = ["state", "cluster"]
    list_select_related = ["project", "cluster"]
    search_fields = ["project__name", "project__slug"]
    raw_id_fields = ["project"]
    # Totals are the ledger's; nothing here edits them directly.
    readonly_fields = ALLOCATION_COLUMNS

    @admin.display(description="granted GPU-h")
    def granted(self, allocation: Allocation) -> str:
        return hours(allocation.granted_gpu_seconds)

    @admin.display(description="used GPU-h")
    def used(self, allocation: Allocation) -> str:
        return hours(allocation.used_gpu_seconds)

    @admin.display(description="held GPU-h")
    def held(self, allocation: Allocation) -> str:
        return hours(allocation.held_gpu_seconds)

    @admin.display(description="available GPU-h")
    def available(self, allocation: Allocation) -> str:
        return hours(allocation.available_gpu_seconds)

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = GrantForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj is not None else []

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["project", "cluster", "starts_on", "ends_on", "gpu_hours", "reason"]
        return self.readonly_fields

    def save_model(self, request, obj, form, change):
        if change:
            return  # nothing on the change page is editable
        try:
            granted = allocation_grant(
                project=form.cleaned_data["project"],
                cluster=form.cleaned_data["cluster"],
                gpu_hours=form.cleaned_data["gpu_hours"],
                starts_on=form.cleaned_data["starts_on"],
                ends_on=form.cleaned_data["ends_on"],
                actor=request.user,
                reason=form.cleaned_data["reason"],
            )
        except AllocationOverlap as exc:
            raise ValidationError(str(exc)) from exc
        obj.pk = granted.pk

    def get_urls(self):
        return [
            path(
                "<int:allocation_id>/adjust/",
                self.admin_site.admin_view(self.adjust_view),
                name="accounts_allocation_adjust",
            ),
            path(
                "slurm-drift/",
                self.admin_site.admin_view(self.drift_view),
                name="accounts_allocation_drift",
            ),
            *super().get_urls(),
        ]

    def drift_view(self, request):
        """What differs between the portal and Slurm: the reconciler's plan, changing nothing."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        reports = [reconcile(cluster=cluster, dry_run=True) for cluster in clusters_enabled()]
        context = {
            **self.admin_site.each_context(request),
            "title": "Slurm drift",
            "reports": reports,
            "opts": self.model._meta,
        }
        return render(request, "admin/accounts/allocation/drift.html", context)

    def adjust_view(self, request, allocation_id: int):
        allocation = self.get_object(request, str(allocation_id))
        if allocation is None or not self.has_change_permission(request, allocation):
            raise PermissionDenied
        form = AdjustForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            seconds = int(form.cleaned_data["gpu_hours"] * 3600)
            try:
                allocation_adjust(
                    allocation=allocation,
                    gpu_seconds=seconds,
                    actor=request.user,
                    reason=form.cleaned_data["reason"],
                )
            except ValueError as exc:
                form.add_error("gpu_hours", str(exc))
            else:
                self.log_change(request, allocation, f"Adjusted by {seconds / 3600:+,.2f} GPU-h")
                self.message_user(
                    request, f"{allocation}: adjusted by {seconds / 3600:+,.2f} GPU-h."
                )
                return redirect("admin:accounts_allocation_change", allocation.pk)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Adjust {allocation}",
            "allocation": allocation,
            "form": form,
            "opts": self.model._meta,
        }
        return render(request, "admin/accounts/allocation/adjust.html", context)


@admin.register(LedgerEntry)
class LedgerEntryAdmin(admin.ModelAdmin):
    """The books, read-only: entries are written by the services and never change."""

    list_display = ["created_at", "allocation", "kind", "gpu_hours", "reference", "actor", "user"]
    list_filter = ["kind", "allocation__cluster"]
    list_select_related = ["allocation__project", "allocation__cluster", "actor", "user"]
    search_fields = ["reference", "allocation__project__slug", "reason"]
    date_hierarchy = "created_at"

    @admin.display(description="GPU-h")
    def gpu_hours(self, entry: LedgerEntry) -> str:
        return f"{entry.gpu_seconds / 3600:+,.2f}"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AllocationRequest)
class AllocationRequestAdmin(admin.ModelAdmin):
    list_display = [
        "project",
        "cluster",
        "gpu_hours",
        "starts_on",
        "ends_on",
        "state",
        "requested_by",
        "created_at",
    ]
    list_filter = ["state", "cluster"]
    list_select_related = ["project", "cluster", "requested_by"]
    search_fields = ["project__name", "justification"]
    readonly_fields = [
        "project",
        "cluster",
        "requested_by",
        "gpu_hours",
        "starts_on",
        "ends_on",
        "justification",
        "state",
        "decided_by",
        "decided_at",
        "allocation",
    ]
    fields = [*readonly_fields, "decision_comment"]
    actions = ["approve", "deny"]

    def has_add_permission(self, request):
        return False  # PIs ask in the portal

    def save_model(self, request, obj, form, change):
        # Only the comment is editable; it is saved for the decision that follows.
        AllocationRequest.objects.filter(pk=obj.pk, state=AllocationRequest.State.PENDING).update(
            decision_comment=obj.decision_comment
        )

    def _decide(self, request, queryset, decide, verb: str) -> None:
        for allocation_request in queryset:
            try:
                decide(allocation_request)
            except (NotAllowed, AllocationOverlap, ValueError) as exc:
                self.message_user(request, f"{allocation_request}: {exc}", messages.ERROR)
            else:
                self.log_change(request, allocation_request, verb)
                self.message_user(request, f"{allocation_request}: {verb.lower()}.")

    @admin.action(description="Approve the selected requests (grants their hours)")
    def approve(self, request, queryset):
        self._decide(
            request,
            queryset,
            lambda r: allocation_request_approve(
                request=r, manager=request.user, comment=r.decision_comment
            ),
            "Approved",
        )

    @admin.action(description="Deny the selected requests (each needs a decision comment)")
    def deny(self, request, queryset):
        self._decide(
            request,
            queryset,
            lambda r: allocation_request_deny(
                request=r, manager=request.user, comment=r.decision_comment
            ),
            "Denied",
        )


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    """What was mailed to PIs and co-PIs, read-only: written by accounts.notifications."""

    list_display = ["allocation", "kind", "claimed_at", "sent_at", "recipients"]
    list_filter = ["kind"]
    list_select_related = ["allocation__project", "allocation__cluster"]
    search_fields = ["allocation__project__slug", "recipients"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
