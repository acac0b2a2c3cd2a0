"""Cluster status: the page ``/status/`` and the API ``GET /api/v1/status/``.

Both read each cluster's last stored status (``clusters.models.ClusterStatus``, made by
the queue sync from one node and one queue listing): no page view runs a Slurm command.
Everyone signed in sees GPUs, nodes by state and the queue's depth; allocation managers
also see the nodes with their reasons (on the page those that need attention, every
node with ``?nodes=all``) and the stuck-GPU alert (``clusters.status``).
"""

from dataclasses import dataclass
from typing import Any, cast

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_GET
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.models import User
from accounts.permissions import is_allocation_manager
from clusters.models import ClusterStatus
from clusters.selectors import cluster_statuses
from clusters.status import CONDITIONS

# Only managers see these parts of a snapshot: node names, reasons, stuck nodes and
# other users' waiting jobs.
_MANAGERS_ONLY = ("nodes", "stuck")


def status_view(status: ClusterStatus, *, manager: bool) -> dict[str, Any]:
    """A cluster's stored status as the page and the API show it to this reader."""
    snapshot = {
        key: value
        for key, value in status.snapshot.items()
        if manager or key not in _MANAGERS_ONLY
        if key != "taken_at"
    }
    if manager:
        stuck = snapshot.get("stuck") or {}
        snapshot["stuck"] = {key: value for key, value in stuck.items() if key != "seen"}
    return {
        "cluster": status.cluster.name,
        "taken_at": status.taken_at,
        "error": status.error,
        "error_at": status.error_at,
        **snapshot,
    }


# --- the page --------------------------------------------------------------------------


@dataclass(frozen=True)
class Bar:
    """A partition's GPUs as one horizontal bar: in use, idle, unavailable (percent)."""

    in_use: float
    idle: float
    unavailable: float

    @property
    def idle_at(self) -> float:
        return self.in_use

    @property
    def unavailable_at(self) -> float:
        return self.in_use + self.idle


def _bar(gpus: dict[str, int]) -> Bar | None:
    total = gpus.get("total") or 0
    if not total:
        return None
    return Bar(
        in_use=round(100 * gpus.get("in_use", 0) / total, 2),
        idle=round(100 * gpus.get("idle", 0) / total, 2),
        unavailable=round(100 * gpus.get("unavailable", 0) / total, 2),
    )


CONDITION_LABELS = {
    "allocated": _("allocated"),
    "mixed": _("partly allocated"),
    "idle": _("idle"),
    "draining": _("draining"),
    "drained": _("drained"),
    "reserved": _("reserved"),
    "down": _("down"),
    "other": _("other"),
}


def _states_shown(nodes_by_state: dict[str, int]) -> list[tuple[str, int]]:
    return [
        (str(CONDITION_LABELS.get(state, state)), count) for state, count in nodes_by_state.items()
    ]


# The nodes simply at work or free. Unless asked for every node, the managers' page lists
# the others (down, drained, reserved…), those with a reason and those with stuck GPUs:
# on a cluster of thousands of nodes, tens of rows rather than thousands (the counts by
# state above them cover the rest).
_AT_WORK = frozenset({"allocated", "mixed", "idle"})


def _needs_attention(node: dict[str, Any], stuck: set[str]) -> bool:
    at_work = node.get("state") in _AT_WORK and not node.get("reason")
    return not at_work or node.get("name") in stuck


def _page_view(status: ClusterStatus, *, manager: bool, all_nodes: bool) -> dict[str, Any]:
    view = status_view(status, manager=manager)
    view["states_shown"] = _states_shown(view.get("nodes_by_state") or {})
    view["partitions"] = [
        {
            **partition,
            "bar": _bar(partition.get("gpus") or {}),
            "states_shown": _states_shown(partition.get("nodes_by_state") or {}),
            "types_shown": ", ".join(t["type"] or "gpu" for t in partition.get("gpu_types") or []),
        }
        for partition in view.get("partitions") or []
    ]
    stuck = view.get("stuck") or {}
    nodes = view.get("nodes") or []
    stuck_names = {row.get("name") for row in stuck.get("nodes") or []}
    view["nodes_total"] = len(nodes)
    view["nodes"] = [node for node in nodes if all_nodes or _needs_attention(node, stuck_names)]
    for node in view["nodes"]:
        node["state_label"] = CONDITION_LABELS.get(node.get("state", ""), node.get("state"))
    for row in stuck.get("nodes") or []:
        row["since_at"] = parse_datetime(row.get("since") or "")
    for row in stuck.get("waiting_jobs") or []:
        row["submitted"] = parse_datetime(row.get("submitted_at") or "")
    return view


@require_GET
@login_required
def status_page(request: HttpRequest) -> HttpResponse:
    manager = is_allocation_manager(cast(User, request.user))
    all_nodes = manager and request.GET.get("nodes") == "all"
    context = {
        "clusters": [
            _page_view(status, manager=manager, all_nodes=all_nodes)
            for status in cluster_statuses(leaving_out=() if manager else _MANAGERS_ONLY)
        ],
        "manager": manager,
        "all_nodes": all_nodes,
        "conditions": CONDITIONS,
    }
    return render(request, "portal/status.html", context)


# --- the API ---------------------------------------------------------------------------


class GpuCountsSerializer(serializers.Serializer):
    total = serializers.IntegerField(help_text="GPUs configured on the nodes.")
    in_use = serializers.IntegerField(help_text="GPUs Slurm counts as allocated.")
    idle = serializers.IntegerField(help_text="GPUs free for a new job now.")
    unavailable = serializers.IntegerField(
        help_text="GPUs no job holds on nodes that take no new work (down, drained or "
        "draining, reserved or in maintenance)."
    )


class GpuTypeCountsSerializer(GpuCountsSerializer):
    type = serializers.CharField(help_text='The GPU type of the nodes\' Gres ("" untyped).')


class PartitionStatusSerializer(serializers.Serializer):
    name = serializers.CharField()
    gpus = GpuCountsSerializer()
    gpu_types = GpuTypeCountsSerializer(many=True)
    nodes_by_state = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="Nodes per state: " + ", ".join(CONDITIONS) + " (states with none left out).",
    )
    pending_jobs = serializers.IntegerField(help_text="Pending jobs (array tasks one each).")
    pending_gpus = serializers.IntegerField(help_text="GPUs the pending jobs ask for.")
    running_jobs = serializers.IntegerField()


class NodeStatusSerializer(serializers.Serializer):
    name = serializers.CharField()
    partitions = serializers.ListField(child=serializers.CharField())
    state = serializers.CharField(help_text="One of " + ", ".join(CONDITIONS) + ".")
    states = serializers.ListField(
        child=serializers.CharField(), help_text="Slurm's base state and flags, lower case."
    )
    reason = serializers.CharField(help_text="Why it is down or drained, as Slurm has it.")
    gpus = serializers.IntegerField()
    gpus_by_type = serializers.DictField(child=serializers.IntegerField())
    allocated_gpus = serializers.IntegerField()
    cpus = serializers.IntegerField()
    allocated_cpus = serializers.IntegerField()


class StuckNodeSerializer(serializers.Serializer):
    name = serializers.CharField()
    allocated_gpus = serializers.IntegerField(help_text="GPUs Slurm counts as allocated.")
    held_by_jobs = serializers.IntegerField(help_text="GPUs the jobs running there hold.")
    stuck_gpus = serializers.IntegerField(help_text="Allocated to no job.")
    since = serializers.DateTimeField(help_text="First seen so.")


class WaitingJobSerializer(serializers.Serializer):
    job_id = serializers.IntegerField(help_text="Slurm's job id.")
    user = serializers.CharField()
    account = serializers.CharField()
    partition = serializers.CharField()
    reason = serializers.CharField()
    gpus = serializers.IntegerField()
    submitted_at = serializers.DateTimeField()


class StuckSerializer(serializers.Serializer):
    nodes = StuckNodeSerializer(many=True)
    gpus = serializers.IntegerField(help_text="Stuck GPUs in all.")
    pending_bound_minutes = serializers.IntegerField(
        help_text="PORTAL_STUCK_GPU_PENDING_MINUTES when the status was taken."
    )
    waiting_count = serializers.IntegerField(
        help_text="Jobs pending longer than the bound in a partition of a stuck node."
    )
    waiting_jobs = WaitingJobSerializer(many=True, help_text="The longest waiting, at most 50.")


class ClusterStatusSerializer(serializers.Serializer):
    cluster = serializers.CharField()
    taken_at = serializers.DateTimeField(help_text="When Slurm was read.")
    error = serializers.CharField(help_text="Why the last poll failed ('' if it did not).")
    error_at = serializers.DateTimeField(allow_null=True)
    gpus = GpuCountsSerializer()
    gpu_types = GpuTypeCountsSerializer(many=True)
    nodes_by_state = serializers.DictField(child=serializers.IntegerField())
    pending_jobs = serializers.IntegerField()
    pending_gpus = serializers.IntegerField()
    running_jobs = serializers.IntegerField()
    partitions = PartitionStatusSerializer(many=True)
    nodes = NodeStatusSerializer(
        many=True, required=False, help_text="Allocation managers only: every node."
    )
    stuck = StuckSerializer(
        required=False, help_text="Allocation managers only: GPUs allocated to no job."
    )


class StatusSerializer(serializers.Serializer):
    clusters = ClusterStatusSerializer(many=True)


class Status(APIView):
    @extend_schema(
        tags=["status"],
        summary="Each cluster's GPUs, nodes and queue, as last polled",
        description="Read from the portal's database (the queue sync polls each cluster "
        "every PORTAL_CLUSTER_STATUS_INTERVAL_S): no Slurm command runs. Allocation "
        "managers also get `stuck` and `nodes`: those that need attention (down, drained, "
        "reserved, with a reason or stuck GPUs), every node with `?nodes=all`.",
        parameters=[
            OpenApiParameter(
                "nodes",
                str,
                enum=["all"],
                description="`all`: every node (managers), not only those that need attention.",
            )
        ],
        responses=StatusSerializer,
    )
    def get(self, request: Request) -> Response:
        manager = is_allocation_manager(cast(User, request.user))
        all_nodes = request.query_params.get("nodes") == "all"
        statuses = cluster_statuses(leaving_out=() if manager else _MANAGERS_ONLY)
        clusters = [status_view(status, manager=manager) for status in statuses]
        for cluster in clusters:
            if "nodes" in cluster and not all_nodes:  # as on the page: those that need it
                stuck = {row.get("name") for row in (cluster.get("stuck") or {}).get("nodes") or []}
                cluster["nodes"] = [n for n in cluster["nodes"] if _needs_attention(n, stuck)]
        return Response(StatusSerializer({"clusters": clusters}).data)
