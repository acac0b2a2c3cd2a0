from django import forms
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import redirect, render
from django.urls import path

from accounts.errors import AllocationOverlap, NotAllowed
from accounts.ledger import allocation_adjust, allocation_grant
from accounts.models import Allocation, AllocationRequest, LedgerEntry, Membership, Project, User
from accounts.reconcile import reconcile
from accounts.requests import allocation_request_approve, allocation_request_deny
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


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "slurm_account", "created_at"]
    search_fields = ["name", "slug", "slurm_account"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline, AllocationInline]


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
