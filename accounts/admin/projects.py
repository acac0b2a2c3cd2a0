"""The console's projects: members, allocations, balance and usage."""

from django.contrib import admin
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, OuterRef, Subquery, Sum
from django.forms.models import BaseInlineFormSet
from django.http import Http404, StreamingHttpResponse
from django.shortcuts import render
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from accounts.admin.common import hours
from accounts.models import (
    AVAILABLE_GPU_SECONDS,
    Allocation,
    Membership,
    Project,
    User,
)
from accounts.selectors import (
    allocation_balance,
    charges_of_projects,
    in_force,
    project_active_allocations,
    project_balance,
    project_usage,
    project_usage_by_month_and_user,
    usage_by_month_and_user,
)
from accounts.services import (
    OWN_MEMBERSHIP,
    membership_remove,
    membership_set,
    project_create,
    project_update,
)
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


class MembershipFormSet(BaseInlineFormSet):
    """The rows of a project's members; nobody but a superuser adds themselves or changes
    their own row (``membership_set``): the page says so instead of saving."""

    editor: User | None = None

    def clean(self) -> None:
        super().clean()
        editor = self.editor
        if editor is None or editor.is_superuser:
            return
        for form in self.forms:
            if not form.has_changed() or form in self.deleted_forms:
                continue
            named = {form.initial.get("user"), getattr(form.cleaned_data.get("user"), "pk", None)}
            if editor.pk in named:
                raise ValidationError(OWN_MEMBERSHIP)


class MembershipInline(admin.TabularInline):
    model = Membership
    formset = MembershipFormSet
    extra = 0
    raw_id_fields = ["user"]
    # Made by hand here; a group-made one becomes one made by hand when changed here.
    readonly_fields = ["source"]

    def get_formset(self, request, obj=None, **kwargs):
        formset = super().get_formset(request, obj, **kwargs)
        return type(formset.__name__, (formset,), {"editor": request.user})


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
            Allocation.objects.filter(in_force(), project=OuterRef("pk"))
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

    @admin.display(description="available GPU-h (allocations in force)")
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
