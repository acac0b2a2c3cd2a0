"""Jobs in the admin console: global templates for allocation managers; jobs, their events
and accounting records read-only (Slurm and the pipeline own them)."""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from accounts.errors import NotAllowed
from jobs.errors import JobInvalid
from jobs.models import AccountingRecord, Job, JobEvent, JobTemplate
from jobs.services import (
    job_template_check,
    job_template_create,
    job_template_delete,
    job_template_update,
    template_change_refusal,
)

EDITABLE_TEMPLATE_FIELDS = ("name", "description", "defaults", "script")


class JobTemplateForm(forms.ModelForm):
    # Kept as typed, as the API keeps it: a script's whitespace is the user's.
    script = forms.CharField(widget=forms.Textarea, strip=False)

    class Meta:
        model = JobTemplate
        fields = EDITABLE_TEMPLATE_FIELDS

    def clean_defaults(self) -> dict:
        return self.cleaned_data["defaults"] or {}

    def clean(self):
        cleaned = super().clean() or {}
        try:
            job_template_check(
                name=cleaned.get("name") or "",
                script=cleaned.get("script") or "",
                defaults=cleaned.get("defaults") or {},
            )
        except JobInvalid as invalid:
            for field, problems in invalid.fields.items():
                self.add_error(field if field in self.fields else None, problems)
        return cleaned


@admin.register(JobTemplate)
class JobTemplateAdmin(admin.ModelAdmin):
    """The console makes global templates; every save and delete goes through the services
    (which record a manager's changes in the audit log)."""

    list_display = ("name", "scope", "owner", "project", "updated_at")
    list_filter = ("scope",)
    search_fields = ("name", "description")
    list_select_related = ("owner", "project")
    form = JobTemplateForm

    def get_fields(self, request, obj=None):
        if obj is None:
            return EDITABLE_TEMPLATE_FIELDS
        return ("name", "description", "scope", "owner", "project", "defaults", "script")

    def get_readonly_fields(self, request, obj=None):
        # Whose a template is stays as it was made: a change would move it between people.
        return () if obj is None else ("scope", "owner", "project")

    def has_change_permission(self, request, obj=None):
        # A researcher's template is shown, not editable: the service refuses the change too.
        allowed = super().has_change_permission(request, obj)
        return allowed and (obj is None or template_change_refusal(request.user, obj) is None)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        template = self.get_object(request, object_id)
        if template is not None:
            refusal = template_change_refusal(request.user, template)
            if refusal is not None and request.method == "GET":
                self.message_user(request, refusal, messages.WARNING)
        return super().change_view(request, object_id, form_url, extra_context)

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        try:
            if change:
                job_template_update(
                    user=request.user,
                    template=obj,
                    **{field: data[field] for field in form.changed_data},
                )
                return
            template = job_template_create(
                user=request.user,
                scope=JobTemplate.Scope.GLOBAL,
                name=data["name"],
                description=data["description"],
                defaults=data["defaults"],
                script=data["script"],
            )
        except NotAllowed as refusal:
            raise PermissionDenied(str(refusal)) from refusal
        # The admin goes on with its own instance (log, redirect): make it this one.
        obj.pk, obj.scope, obj._state.adding = template.pk, template.scope, False

    def delete_model(self, request, obj):
        try:
            job_template_delete(user=request.user, template=obj)
        except NotAllowed as refusal:
            raise PermissionDenied(str(refusal)) from refusal

    def delete_queryset(self, request, queryset):
        for template in queryset:
            self.delete_model(request, template)


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


class JobEventInline(admin.TabularInline):
    model = JobEvent
    fields = ("at", "state", "detail")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(ReadOnly):
    list_display = (
        "id", "name", "owner", "project", "partition", "state", "slurm_job_id",
        "requested_gpu_hours", "used_gpu_hours", "created_at",
    )  # fmt: skip
    list_filter = ("state", "cluster", "partition__name")
    search_fields = ("name", "owner__username", "project__slug", "=slurm_job_id")
    list_select_related = ("owner", "project", "partition__cluster")
    date_hierarchy = "created_at"
    inlines = [JobEventInline]
    show_full_result_count = False  # no COUNT(*) over millions of jobs on every page
    # What running the bank needs: the request, its price, its course in Slurm and its
    # charge. Never the researcher's script, environment (where secrets go), paths or
    # submit token, which the API does not show managers either.
    fields = (
        ("owner", "project", "cluster", "partition", "template"),
        ("name", "nodes", "gpus_per_node", "cpus_per_gpu", "mem_per_gpu_gb"),
        ("time_limit_minutes", "array", "array_tasks", "requeue"),
        ("billing_weight", "cpu_hour_rate", "requested_gpu_seconds", "used_gpu_seconds"),
        ("state", "slurm_state", "slurm_job_id", "reason", "exit_code"),
        ("submit_attempts", "submit_error", "cancel_requested_at"),
        ("created_at", "submitted_at", "started_at", "ended_at"),
    )
    readonly_fields = [name for row in fields for name in row]


@admin.register(AccountingRecord)
class AccountingRecordAdmin(ReadOnly):
    list_display = (
        "slurm_job_id", "cluster", "user", "account", "partition", "state",
        "allocated_gpus", "allocated_cpus", "elapsed_s", "charged_gpu_seconds", "charge_note",
        "ended_at",
    )  # fmt: skip
    list_filter = ("cluster", "state")
    search_fields = ("=slurm_job_id", "user", "account")
    list_select_related = ("cluster",)
    raw_id_fields = ("job",)
    show_full_result_count = False
