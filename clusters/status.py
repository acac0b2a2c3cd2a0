"""A cluster's status from one poll: its node listing and its queue listing, both read
by the queue sync (``jobs/queue_sync.py``), turned into the snapshot the status page,
the API and ``sgp status`` show. Pure functions of Slurm's records: no query, no call.

The snapshot is plain JSON (it is stored as it is, see ``clusters.models.ClusterStatus``):

- ``gpus`` (``total``, ``in_use``, ``idle``, ``unavailable``) for the cluster, by type
  (``gpu_types``) and per partition; a node in two partitions counts in both, once in
  the cluster's total. ``unavailable``: GPUs no job holds on nodes that take no new
  work (down, drained or draining, reserved or in maintenance);
- ``nodes_by_state`` (one word per node, ``node_condition``), per partition too;
- the queue's depth: ``pending_jobs`` and ``pending_gpus`` (an array's pending tasks
  count one each), ``running_jobs``;
- ``nodes``: every node with its state and reason (for allocation managers);
- ``stuck``: GPUs Slurm counts as allocated on a node that no job of the same queue
  listing holds there (``stuck_gpus``), and the jobs that have pended longer than a
  bound while that is so. Slurm 22.05 once kept 8 GPUs allocated to no job after a
  slurmctld restart, and jobs pended until ``scontrol reconfigure``.

The node and queue listings are read one after the other, so a job that started or
ended in between can make a node look stuck for one poll: a node is reported only
when the previous snapshot found it stuck too (``stuck.nodes[].since`` is carried
over from it).
"""

import datetime as dt
import functools
import re
from collections import Counter, defaultdict
from typing import Any

from clusters.slurm.parsing import expand_hostlist
from clusters.slurm.states import SlurmJobState
from clusters.slurm.types import NodeInfo, QueueEntry

Json = dict[str, Any]

# States in which a job holds the GPUs of its nodes.
HOLDING = frozenset(
    {
        SlurmJobState.RUNNING,
        SlurmJobState.COMPLETING,
        SlurmJobState.SUSPENDED,
        SlurmJobState.CONFIGURING,
        SlurmJobState.SIGNALING,
        SlurmJobState.STAGE_OUT,
        SlurmJobState.RESIZING,
    }
)
# The words of ``node_condition``, busiest first: the order the page lists them in.
CONDITIONS = ("allocated", "mixed", "idle", "draining", "drained", "reserved", "down", "other")
WAITING_LISTED = 20  # the longest waiting, with the count of all: enough to act on
_UNAVAILABLE = frozenset({"draining", "drained", "reserved", "down"})


def node_condition(states: tuple[str, ...]) -> str:
    """One word for a node's state and flags: down (or not responding), drained,
    draining (drained while jobs still run), reserved (or maintenance), allocated,
    mixed, idle, or other (future, unknown, …)."""
    base, flags = states[0], set(states[1:])
    if base in ("down", "error", "fail", "unknown", "future") or "not_responding" in flags:
        return "down"
    if "drain" in flags or base in ("drained", "draining", "drain"):
        return "draining" if base in ("allocated", "mixed", "completing", "draining") else "drained"
    if flags & {"reserved", "maint"} or base in ("reserved", "maint"):
        return "reserved"
    if base in ("allocated", "mixed", "idle"):
        return base
    if base == "completing":
        return "allocated"
    return "other"


def _gpu_counts(node: NodeInfo, condition: str) -> Counter:
    total = node.gpus
    in_use = min(node.allocated_gpus, total)
    unavailable = total - in_use if condition in _UNAVAILABLE else 0
    return Counter(
        total=total, in_use=in_use, unavailable=unavailable, idle=total - in_use - unavailable
    )


def _gpu_counts_by_type(node: NodeInfo, counts: Counter) -> dict[str, Counter]:
    """The node's counts split by GPU type. Slurm's AllocTRES gives the allocated total
    only: on a node of several types the GPUs in use are put in the types' order."""
    by_type: dict[str, Counter] = {}
    in_use, unavailable = counts["in_use"], counts["unavailable"]
    for gpu_type, total in node.gpus_by_type:
        used = min(in_use, total)
        off = min(unavailable, total - used)
        in_use, unavailable = in_use - used, unavailable - off
        by_type[gpu_type] = Counter(
            total=total, in_use=used, unavailable=off, idle=total - used - off
        )
    return by_type


_ARRAY_RANGE = re.compile(r"(\d+)(?:-(\d+))?(?::(\d+))?")


def array_task_count(spec: str | None) -> int:
    """How many tasks a pending array record stands for: ``[4-9%2]`` (rest, sacct) or
    ``4-9%2`` (squeue) → 6, ``[1,3,5]`` → 3, ``[0-9:2]`` → 5; one task (or none) is 1."""
    if not spec:
        return 1
    count = 0
    for low, high, step in _ARRAY_RANGE.findall(spec.strip("[]").split("%")[0]):
        count += (int(high) - int(low)) // int(step or 1) + 1 if high else 1
    return max(count, 1)


@functools.lru_cache(maxsize=4096)  # running jobs share their node lists, poll after poll
def _hosts(hostlist: str) -> tuple[str, ...]:
    return tuple(expand_hostlist(hostlist))


def held_gpus(queue: list[QueueEntry]) -> dict[str, int]:
    """GPUs each node has held by the jobs of ``queue`` that hold their nodes: a job's
    GPUs shared evenly among its nodes (as a per-node request is)."""
    held: dict[str, int] = defaultdict(int)
    for entry in queue:
        if entry.state not in HOLDING or not entry.gpus or not entry.nodes:
            continue
        names = _hosts(entry.nodes)
        share, extra = divmod(entry.gpus, len(names))
        for index, name in enumerate(names):
            held[name] += share + (1 if index < extra else 0)
    return held


def stuck_gpus(nodes: list[NodeInfo], queue: list[QueueEntry]) -> dict[str, tuple[int, int]]:
    """Nodes on which Slurm counts more GPUs allocated than the running jobs of ``queue``
    hold there: name → (allocated, held by jobs). A node where a job runs whose GPUs the
    listing does not say (``gpus_known``) is not judged: no alarm on a guess."""
    held = held_gpus(queue)
    unjudged = {
        name
        for entry in queue
        if entry.state in HOLDING and not entry.gpus_known and entry.nodes
        for name in _hosts(entry.nodes)
    }
    return {
        node.name: (node.allocated_gpus, held.get(node.name, 0))
        for node in nodes
        if node.allocated_gpus > held.get(node.name, 0) and node.name not in unjudged
    }


def status_snapshot(
    *,
    nodes: list[NodeInfo],
    queue: list[QueueEntry],
    now: dt.datetime,
    pending_bound: dt.timedelta,
    previous: Json | None = None,
) -> Json:
    """The snapshot (see the module's docstring) of one node and one queue listing;
    ``previous`` is the cluster's last snapshot, whose stuck nodes say since when."""
    cluster_gpus: Counter = Counter(total=0, in_use=0, idle=0, unavailable=0)
    cluster_types: dict[str, Counter] = defaultdict(Counter)
    cluster_conditions: Counter = Counter()
    partitions: dict[str, Json] = {}

    def partition(name: str) -> Json:
        # Called for every job of the queue: the new partition's counters are made
        # only when it is new.
        one = partitions.get(name)
        if one is None:
            one = partitions[name] = {
                "gpus": Counter(total=0, in_use=0, idle=0, unavailable=0),
                "gpu_types": defaultdict(Counter),
                "nodes_by_state": Counter(),
                "pending_jobs": 0,
                "pending_gpus": 0,
                "running_jobs": 0,
            }
        return one

    node_rows = []
    for node in nodes:
        condition = node_condition(node.states)
        counts = _gpu_counts(node, condition)
        by_type = _gpu_counts_by_type(node, counts)
        cluster_gpus.update(counts)
        cluster_conditions[condition] += 1
        for gpu_type, type_counts in by_type.items():
            cluster_types[gpu_type].update(type_counts)
        for name in node.partitions:
            one = partition(name)
            one["gpus"].update(counts)
            one["nodes_by_state"][condition] += 1
            for gpu_type, type_counts in by_type.items():
                one["gpu_types"][gpu_type].update(type_counts)
        node_rows.append(
            {
                "name": node.name,
                "partitions": list(node.partitions),
                "state": condition,
                "states": list(node.states),
                "reason": node.reason,
                "gpus": node.gpus,
                "gpus_by_type": dict(node.gpus_by_type),
                "allocated_gpus": node.allocated_gpus,
                "cpus": node.cpus,
                "allocated_cpus": node.allocated_cpus,
            }
        )

    pending_jobs = pending_gpus = running_jobs = 0
    for entry in queue:
        if entry.state == SlurmJobState.PENDING:
            tasks = array_task_count(entry.array_task)
            pending_jobs += tasks
            pending_gpus += tasks * entry.gpus
            for name in entry.partition.split(","):
                one = partition(name)
                one["pending_jobs"] += tasks
                one["pending_gpus"] += tasks * entry.gpus
        elif entry.state in HOLDING:
            running_jobs += 1
            partition(entry.partition)["running_jobs"] += 1

    return {
        "taken_at": now.isoformat(),
        "gpus": dict(cluster_gpus),
        "gpu_types": _types(cluster_types),
        "nodes_by_state": _conditions(cluster_conditions),
        "pending_jobs": pending_jobs,
        "pending_gpus": pending_gpus,
        "running_jobs": running_jobs,
        "partitions": [
            {
                "name": name,
                "gpus": dict(one["gpus"]),
                "gpu_types": _types(one["gpu_types"]),
                "nodes_by_state": _conditions(one["nodes_by_state"]),
                "pending_jobs": one["pending_jobs"],
                "pending_gpus": one["pending_gpus"],
                "running_jobs": one["running_jobs"],
            }
            for name, one in sorted(partitions.items())
        ],
        "nodes": sorted(node_rows, key=lambda row: row["name"]),
        "stuck": _stuck(nodes, queue, now=now, pending_bound=pending_bound, previous=previous),
    }


def _types(by_type: dict[str, Counter]) -> list[Json]:
    zero = {"total": 0, "in_use": 0, "idle": 0, "unavailable": 0}
    return [{"type": name, **zero, **counts} for name, counts in sorted(by_type.items())]


def _conditions(counts: Counter) -> dict[str, int]:
    return {condition: counts[condition] for condition in CONDITIONS if counts[condition]}


def _stuck(
    nodes: list[NodeInfo],
    queue: list[QueueEntry],
    *,
    now: dt.datetime,
    pending_bound: dt.timedelta,
    previous: Json | None,
) -> Json:
    seen_before = {
        row["name"]: row["since"] for row in ((previous or {}).get("stuck") or {}).get("seen", [])
    }
    seen, confirmed = [], []
    partitions_of = {node.name: node.partitions for node in nodes}
    for name, (allocated, held) in sorted(stuck_gpus(nodes, queue).items()):
        row = {
            "name": name,
            "allocated_gpus": allocated,
            "held_by_jobs": held,
            "stuck_gpus": allocated - held,
            "since": seen_before.get(name, now.isoformat()),
        }
        seen.append(row)
        if name in seen_before:
            confirmed.append(row)
    stuck_partitions = {p for row in confirmed for p in partitions_of.get(row["name"], ())}
    waiting = []
    if confirmed:
        for entry in queue:
            if (
                entry.state == SlurmJobState.PENDING
                and entry.submitted_at is not None
                and now - entry.submitted_at > pending_bound
                and set(entry.partition.split(",")) & stuck_partitions
            ):
                waiting.append(
                    {
                        "job_id": entry.job_id,
                        "user": entry.user,
                        "account": entry.account,
                        "partition": entry.partition,
                        "reason": entry.reason,
                        "gpus": entry.gpus,
                        "submitted_at": entry.submitted_at.isoformat(),
                    }
                )
    waiting.sort(key=lambda row: str(row["submitted_at"]))
    return {
        "seen": seen,  # stuck in this poll (the next one confirms or clears them)
        "nodes": confirmed,  # stuck in this poll and the one before
        "gpus": sum(row["stuck_gpus"] for row in confirmed),
        "pending_bound_minutes": int(pending_bound.total_seconds() // 60),
        "waiting_count": len(waiting),
        "waiting_jobs": waiting[:WAITING_LISTED],  # the longest waiting
    }
