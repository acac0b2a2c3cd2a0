"""The console's allocations: granted, adjusted and revoked through the ledger; the
ledger's entries; the PIs' requests for hours; and the drift between the portal and Slurm."""

import datetime as dt
import re
from dataclasses import dataclass

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import redirect, render
from django.template.response import TemplateResponse
from django.urls import path
from django.utils.translation import gettext as _
from kombu.exceptions import OperationalError

from accounts.admin.common import hours
from accounts.errors import AllocationOverlap, AlreadyDecided, NotAllowed, Refused
from accounts.ledger import (
    allocation_adjust,
    allocation_grant,
    allocation_overlap,
    allocation_revoke,
)
from accounts.models import (
    Allocation,
    AllocationRequest,
    LedgerEntry,
)
from accounts.requests import allocation_request_approve, allocation_request_deny
from accounts.selectors import (
    allocation_status,
    is_upcoming,
    last_reconcile_reports,
)
from accounts.tasks import reconcile_task
from clusters.models import Cluster, RefusedRecord
from clusters.selectors import refused_records_recent
from clusters.slurm.types import visible


class GrantForm(forms.ModelForm):
    """Adding an allocation in the console grants its hours through the ledger."""

    gpu_hours = forms.IntegerField(min_value=1, label="GPU-hours")
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}))

    class Meta:
        model = Allocation
        fields = ["project", "cluster", "starts_on", "ends_on"]

    def clean(self):
        cleaned = super().clean() or {}
        names = ("project", "cluster", "starts_on", "ends_on")
        # Only when each field is valid; otherwise the form shows their own errors.
        if all(cleaned.get(name) for name in names) and (
            overlap := allocation_overlap(**{name: cleaned[name] for name in names})
        ):
            raise ValidationError(overlap)
        return cleaned


class AdjustForm(forms.Form):
    gpu_hours = forms.DecimalField(
        max_digits=12, decimal_places=2, label="GPU-hours to add (negative to take away)"
    )
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}))


class RevokeForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Kept in the ledger with your name, on each allocation revoked.",
        error_messages={"required": "Say why the allocations are revoked; nothing was revoked."},
    )


# The drift page shows so many of a cluster's refused records, the most recently seen
# first (the console's list has them all), and so much of each one's text.
REFUSED_SHOWN = 50
EXCERPT_CHARS = 160
_PADDING = re.compile(r"  +")


@dataclass(frozen=True)
class RefusedRow:
    """A refused record as the drift page shows it: its texts escaped (``visible``)."""

    job_id: int | None
    listing: str
    problem: str
    excerpt: str
    first_seen_at: dt.datetime
    last_seen_at: dt.datetime
    times_seen: int

    @classmethod
    def of(cls, record: RefusedRecord) -> "RefusedRow":
        # Slurm pads its fixed-width fields with spaces: one shows where each ends.
        text = _PADDING.sub(" ", record.text)
        cut = len(text) > EXCERPT_CHARS
        return cls(
            job_id=record.slurm_job_id,
            listing=record.get_listing_display(),
            problem=visible(record.problem),
            excerpt=visible(text[:EXCERPT_CHARS]) + ("…" if cut else ""),
            first_seen_at=record.first_seen_at,
            last_seen_at=record.last_seen_at,
            times_seen=record.times_seen,
        )


@dataclass(frozen=True)
class RefusedShown:
    """A cluster's refused records on the drift page: the first ``REFUSED_SHOWN``, and
    how many were seen within the day in all."""

    rows: list[RefusedRow]
    total: int

    @property
    def more(self) -> int:
        return self.total - len(self.rows)


def refused_shown(cluster: Cluster) -> RefusedShown:
    recent = refused_records_recent(clusters=[cluster])
    rows = [RefusedRow.of(record) for record in recent[:REFUSED_SHOWN]]
    total = recent.count() if len(rows) == REFUSED_SHOWN else len(rows)
    return RefusedShown(rows=rows, total=total)


ALLOCATION_COLUMNS = (
    "project",
    "cluster",
    "status",
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
    actions = ["revoke"]

    @admin.display(description="state", ordering="state")
    def status(self, allocation: Allocation) -> str:
        # "Starts on …" rather than "Active" for a grant of a later period.
        return allocation_status(allocation)

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
        if is_upcoming(allocation):
            # Nothing of it is available (to jobs, or in Slurm's limits) before its period.
            return f"— ({allocation_status(allocation)})"
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
        """What differed between the portal and Slurm when the reconciler last ran, from
        its stored report: the web tier makes no Slurm call (it may not even hold the
        rights to). A POST asks the workers for a run now."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            if not self.has_change_permission(request):
                raise PermissionDenied
            self._queue_reconcile(request)
            return redirect("admin:accounts_allocation_drift")
        context = {
            **self.admin_site.each_context(request),
            "title": _("Slurm drift"),
            # What Slurm listed that the portal refused, as the syncs kept it.
            "reports": [
                (cluster, report, refused_shown(cluster))
                for cluster, report in last_reconcile_reports()
            ],
            "can_reconcile": self.has_change_permission(request),
            "can_list_refused": request.user.has_perm("clusters.view_refusedrecord"),
            "opts": self.model._meta,
        }
        return render(request, "admin/accounts/allocation/drift.html", context)

    def _queue_reconcile(self, request) -> None:
        try:
            # No publish retries: a page must not hang on a broker that is down.
            reconcile_task.apply_async(retry=False)
        except OperationalError:
            self.message_user(
                request,
                _("The workers' queue does not answer; the reconciler runs again by itself."),
                messages.ERROR,
            )
        else:
            self.message_user(
                request,
                _("A reconcile run is queued; reload this page in a minute for its report."),
            )

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
            except Refused as exc:
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

    @admin.action(
        description="Revoke the selected allocations (their unused GPU-hours lapse)",
        permissions=["change"],
    )
    def revoke(self, request, queryset):
        """Asks for the reason on a page of its own first, as deleting does."""
        form = RevokeForm(request.POST if "post" in request.POST else None)
        if form.is_valid():
            reason = form.cleaned_data["reason"]
            for allocation in queryset:
                try:
                    entry = allocation_revoke(
                        allocation=allocation, actor=request.user, reason=reason
                    )
                except Refused as exc:
                    self.message_user(request, f"{allocation}: {exc}", messages.ERROR)
                    continue
                if entry is None:
                    self.message_user(request, f"{allocation}: already revoked.", messages.WARNING)
                    continue
                lapsed = hours(-entry.gpu_seconds)
                self.log_change(request, allocation, f"Revoked ({lapsed} GPU-h lapsed): {reason}")
                self.message_user(request, f"{allocation}: revoked; {lapsed} GPU-h lapsed.")
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Revoke allocations",
            "rows": [
                (
                    allocation,
                    allocation_status(allocation),
                    hours(max(allocation.available_gpu_seconds, 0)),
                    hours(allocation.held_gpu_seconds),
                )
                for allocation in queryset.select_related("project", "cluster")
            ],
            "form": form,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/accounts/allocation/revoke.html", context)


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
            except (NotAllowed, AlreadyDecided, AllocationOverlap, Refused) as exc:
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
