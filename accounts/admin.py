"""The allocation managers' console: registrations and thin views over the services.

Every write that matters goes through a service with the acting user, and the
admin log (LogEntry) records who changed what and, where a reason is asked, why.
"""

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, OuterRef, Subquery, Sum
from django.http import Http404, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext as _
from kombu.exceptions import OperationalError

from accounts.errors import AllocationOverlap, AlreadyDecided, NotAllowed, Refused
from accounts.ledger import (
    allocation_adjust,
    allocation_grant,
    allocation_overlap,
    allocation_revoke,
)
from accounts.models import (
    AVAILABLE_GPU_SECONDS,
    Allocation,
    AllocationRequest,
    LedgerEntry,
    Membership,
    Notification,
    Project,
    User,
)
from accounts.requests import allocation_request_approve, allocation_request_deny
from accounts.selectors import (
    allocation_balance,
    charges_of_projects,
    last_reconcile_reports,
    project_active_allocations,
    project_balance,
    project_usage,
    project_usage_by_month_and_user,
    usage_by_month_and_user,
)
from accounts.services import (
    membership_remove,
    membership_set,
    project_create,
    project_update,
)
from accounts.tasks import reconcile_task
from accounts.usage import (
    CHARGES_HEADER,
    MONTHLY_HEADER,
    NO_PARTITION,
    NO_USER,
    charge_rows,
    csv_response,
    monthly_rows,
    usage_chart,
)


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


def hours(seconds: int) -> str:
    return f"{seconds / 3600:,.1f}"


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "slurm_account", "members", "available", "usage_link"]
    search_fields = ["name", "slug", "slurm_account"]
    fields = ["name", "slug", "slurm_account", "description"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline, AllocationInline]
    actions = ["export_usage_csv"]

    def get_readonly_fields(self, request, obj=None):
        # Slurm's account, associations and limit carry the name: renaming it here
        # would leave them behind under the old one.
        return ["slurm_account"] if obj is not None else []

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        if change:
            editable = ("name", "slug", "description")
            project_update(
                project=obj,
                actor=request.user,
                **{field: data[field] for field in form.changed_data if field in editable},
            )
            return
        project = project_create(
            slug=data["slug"],
            name=data["name"],
            slurm_account=data["slurm_account"],
            description=data["description"],
            actor=request.user,
        )
        # The admin goes on with its own instance (inlines, log, redirect): make it this one.
        obj.pk, obj.created_at, obj._state.adding = project.pk, project.created_at, False

    def save_formset(self, request, form, formset, change):
        if formset.model is Membership:
            self._save_memberships(request, form.instance, formset)
        else:
            formset.save()

    def _save_memberships(self, request, project: Project, formset) -> None:
        """Each deleted, changed and added row through the services, with the acting user.

        The admin log's change message is built from the formset's new, changed
        and deleted objects, so they are filled in as formset.save() would.
        """
        formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []
        # A form's instance already carries the edits: the old user is the database's.
        saved = {m.pk: m for m in Membership.objects.filter(project=project).select_related("user")}
        to_delete = formset.deleted_forms
        rows = [
            (form, saved[form.instance.pk])
            for form in formset.initial_forms
            if form.instance.pk in saved
        ]
        for form, old in rows:
            if form in to_delete:
                membership_remove(project=project, user=old.user, actor=request.user)
                formset.deleted_objects.append(old)
        for form, old in rows:
            if form in to_delete or not form.has_changed():
                continue
            user, role = form.cleaned_data["user"], form.cleaned_data["role"]
            if user != old.user:
                membership_remove(project=project, user=old.user, actor=request.user)
            membership = membership_set(project=project, user=user, role=role, actor=request.user)
            formset.changed_objects.append((membership, form.changed_data))
        for form in formset.extra_forms:
            if form.has_changed() and form not in to_delete:
                user, role = form.cleaned_data["user"], form.cleaned_data["role"]
                membership = membership_set(
                    project=project, user=user, role=role, actor=request.user
                )
                formset.new_objects.append(membership)

    def get_queryset(self, request):
        active = (
            Allocation.objects.filter(project=OuterRef("pk"), state=Allocation.State.ACTIVE)
            .values("project")
            .annotate(seconds=Sum(AVAILABLE_GPU_SECONDS))
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
        return csv_response(f"{project.slug}-charges.csv", CHARGES_HEADER, charge_rows(charges))

    def monthly_csv_view(self, request, project_id: int) -> StreamingHttpResponse:
        project = self._viewable(request, project_id)
        usage = usage_by_month_and_user(Project.objects.filter(pk=project.pk))
        return csv_response(f"{project.slug}-usage.csv", MONTHLY_HEADER, monthly_rows(usage))

    @admin.action(
        description="Export usage as CSV (GPU-hours per month and user)", permissions=["view"]
    )
    def export_usage_csv(self, request, queryset):
        filename = f"usage-{timezone.localdate():%Y-%m-%d}.csv"
        usage = usage_by_month_and_user(queryset)
        return csv_response(filename, MONTHLY_HEADER, monthly_rows(usage))


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
    actions = ["revoke"]

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
            "reports": last_reconcile_reports(),
            "can_reconcile": self.has_change_permission(request),
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
