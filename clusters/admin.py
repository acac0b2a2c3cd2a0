from django import forms
from django.contrib import admin

from clusters.models import Cluster, Partition
from clusters.services import partition_set_billing_weight

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


class PartitionInline(admin.TabularInline):
    model = Partition
    extra = 0
    fields = ["name", "is_up", "max_time_minutes", "gpus_per_node", "gpu_type", "billing_weight"]
    # The weight is changed on the partition's own page, where a reason is asked.
    readonly_fields = [
        "name",
        "is_up",
        "max_time_minutes",
        "gpus_per_node",
        "gpu_type",
        "billing_weight",
    ]
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False  # partitions come from Slurm


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "backend", "is_enabled", "created_at"]
    inlines = [PartitionInline]


class BillingWeightForm(forms.ModelForm):
    reason = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Why the weight changes; kept in the history with your name.",
    )

    class Meta:
        model = Partition
        fields = ["billing_weight"]

    def clean_reason(self) -> str:
        return self.cleaned_data["reason"].strip()

    def clean(self):
        cleaned = super().clean() or {}
        if "billing_weight" in self.changed_data and not cleaned.get("reason"):
            self.add_error(
                "reason",
                "Say why the billing weight changes: it changes what every job on this "
                "partition costs.",
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
        "synced_at",
    ]
    list_filter = ["cluster", "is_up"]
    list_select_related = ["cluster"]
    search_fields = ["name"]
    form = BillingWeightForm
    fields = [*SYNCED_FIELDS, "billing_weight", "reason"]
    readonly_fields = SYNCED_FIELDS

    def has_add_permission(self, request):
        return False  # partitions come from Slurm

    def save_model(self, request, obj, form, change):
        if "billing_weight" in form.changed_data:
            partition_set_billing_weight(
                partition=obj,
                weight=form.cleaned_data["billing_weight"],
                actor=request.user,
                reason=form.cleaned_data["reason"],
            )

    def construct_change_message(self, request, form, formsets, add=False):
        if "billing_weight" not in form.changed_data:
            return super().construct_change_message(request, form, formsets, add)
        was, now = form.initial["billing_weight"], form.cleaned_data["billing_weight"]
        return f"Billing weight {was:.3f} → {now:.3f}: {form.cleaned_data['reason']}"
