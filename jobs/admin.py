"""Jobs in the admin console: global templates for allocation managers; jobs, their events
and accounting records read-only (Slurm and the pipeline own them)."""

from django.contrib import admin
from django.http import HttpRequest

from jobs.models import AccountingRecord, Job, JobEvent, JobTemplate


@admin.register(JobTemplate)
class JobTemplateAdmin(admin.ModelAdmin):
    list_display = ("name", "scope", "owner", "project", "updated_at")
    list_filter = ("scope",)
    search_fields = ("name", "description")
    list_select_related = ("owner", "project")
    raw_id_fields = ("owner", "project")
    fields = ("name", "description", "scope", "owner", "project", "defaults", "script")


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


@admin.register(AccountingRecord)
class AccountingRecordAdmin(ReadOnly):
    list_display = (
        "slurm_job_id", "cluster", "user", "account", "partition", "state",
        "allocated_gpus", "elapsed_s", "charged_gpu_seconds", "charge_note", "ended_at",
    )  # fmt: skip
    list_filter = ("cluster", "state")
    search_fields = ("=slurm_job_id", "user", "account")
    list_select_related = ("cluster",)
    raw_id_fields = ("job",)
    show_full_result_count = False
