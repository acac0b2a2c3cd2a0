from django.contrib import admin

from clusters.models import Cluster, Partition


class PartitionInline(admin.TabularInline):
    model = Partition
    extra = 0
    fields = ["name", "is_up", "max_time_minutes", "gpus_per_node", "gpu_type", "billing_weight"]
    readonly_fields = ["name", "is_up", "max_time_minutes", "gpus_per_node", "gpu_type"]
    can_delete = False


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "backend", "is_enabled", "created_at"]
    inlines = [PartitionInline]


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
    # Everything but the billing weight is Slurm's and is overwritten by the sync.
    readonly_fields = [
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
