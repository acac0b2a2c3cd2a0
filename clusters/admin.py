from typing import cast

from django import forms
from django.contrib import admin
from django.db import models
from django.utils.translation import gettext_lazy as _

from clusters.models import Cluster, Partition, RefusedRecord
from clusters.services import partition_set_billing_weight, partition_set_cpu_hour_rate
from clusters.slurm.types import visible

# Slurm's, overwritten by every sync (clusters.services.partitions_sync).
SYNCED_FIELDS = [
    "cluster",
    "name",
    "is_default",
    "is_up",
    "max_time_minutes",
    "nodes",
    "gpus_per_node",
    "gpu_type",
    "total_gpus",
    "synced_at",
]


INLINE_FIELDS = (
    "name",
    "is_up",
    "max_time_minutes",
    "gpus_per_node",
    "gpu_type",
    "billing_weight",
    "cpu_hour_rate",
)


class PartitionInline(admin.TabularInline):
    model = Partition
    extra = 0
    fields = INLINE_FIELDS
    # Prices are changed on the partition's own page, where a reason is asked.
    readonly_fields = INLINE_FIELDS
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False  # partitions come from Slurm


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    """Superusers add and change clusters; allocation managers only view them (their
    group's permissions): the client tools are commands the workers run, with the right
    to act as any job owner."""

    list_display = ["name", "backend", "parent_account", "is_enabled", "created_at"]
    fieldsets = (
        (None, {"fields": ["name", "backend", "is_enabled", "admin_user", "parent_account"]}),
        ("slurmrestd (rest backend)", {"fields": ["rest_url", "rest_api_version", "jwt_key_file"]}),
        ("Client tools (cli backend)", {"fields": ["command_prefix", "run_as_prefix"]}),
    )
    inlines = [PartitionInline]


# The prices an allocation manager sets, each through its service (audited, with a reason).
PRICE_SERVICES = {
    "billing_weight": lambda partition, value, **kw: partition_set_billing_weight(
        partition=partition, weight=value, **kw
    ),
    "cpu_hour_rate": lambda partition, value, **kw: partition_set_cpu_hour_rate(
        partition=partition, rate=value, **kw
    ),
}


class PricesForm(forms.ModelForm):
    reason = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Why the price changes; kept in the history with your name.",
    )

    class Meta:
        model = Partition
        fields = list(PRICE_SERVICES)

    def clean_reason(self) -> str:
        return self.cleaned_data["reason"].strip()

    def clean(self):
        cleaned = super().clean() or {}
        changed = [name for name in PRICE_SERVICES if name in self.changed_data]
        if changed and not cleaned.get("reason"):
            self.add_error(
                "reason",
                f"Say why the {' and '.join(n.replace('_', ' ') for n in changed)} "
                "changes: it changes what every job on this partition costs.",
            )
        return cleaned


@admin.register(Partition)
class PartitionAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "cluster",
        "is_default",
        "is_up",
        "max_time_minutes",
        "gpus_per_node",
        "gpu_type",
        "total_gpus",
        "billing_weight",
        "cpu_hour_rate",
        "synced_at",
    ]
    list_filter = ["cluster", "is_up"]
    list_select_related = ["cluster"]
    search_fields = ["name"]
    form = PricesForm
    fields = [*SYNCED_FIELDS, *PRICE_SERVICES, "reason"]
    readonly_fields = SYNCED_FIELDS

    def has_add_permission(self, request):
        return False  # partitions come from Slurm

    def save_model(self, request, obj, form, change):
        for name, service in PRICE_SERVICES.items():
            if name in form.changed_data:
                service(
                    obj,
                    form.cleaned_data[name],
                    actor=request.user,
                    reason=form.cleaned_data["reason"],
                )

    def construct_change_message(self, request, form, formsets, add=False):
        changed = [name for name in PRICE_SERVICES if name in form.changed_data]
        if not changed:
            return super().construct_change_message(request, form, formsets, add)
        places = {
            name: cast(models.DecimalField, Partition._meta.get_field(name)).decimal_places
            for name in changed
        }
        changes = [
            f"{name.replace('_', ' ').capitalize()} {form.initial[name]:.{places[name]}f} → "
            f"{form.cleaned_data[name]:.{places[name]}f}"
            for name in changed
        ]
        return f"{', '.join(changes)}: {form.cleaned_data['reason']}"


@admin.register(RefusedRecord)
class RefusedRecordAdmin(admin.ModelAdmin):
    """Records of Slurm's listings the portal refused, as the syncs kept them: read-only
    (the syncs write them), for allocation managers (view permission). The texts are a
    user's bytes: shown with control characters escaped (``visible``)."""

    list_display = [
        "slurm_job_id",
        "cluster",
        "listing",
        "problem_shown",
        "first_seen_at",
        "last_seen_at",
        "times_seen",
    ]
    list_filter = ["cluster", "listing"]
    list_select_related = ["cluster"]
    # Compared as text (Django casts the id), so any search term is a query, never an error.
    search_fields = ["slurm_job_id__exact"]
    date_hierarchy = "last_seen_at"
    fields = readonly_fields = (
        "cluster",
        "listing",
        "slurm_job_id",
        "problem_shown",
        "text_shown",
        "first_seen_at",
        "last_seen_at",
        "times_seen",
    )

    @admin.display(description=_("problem"), ordering="problem")
    def problem_shown(self, record: RefusedRecord) -> str:
        return visible(record.problem)

    @admin.display(description=_("text as Slurm printed it"))
    def text_shown(self, record: RefusedRecord) -> str:
        return visible(record.text)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
