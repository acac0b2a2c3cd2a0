"""sgp status: each cluster's GPUs, nodes and queue, as the portal last read them."""

import argparse
from typing import Any

from client.exits import Exit
from client.formatting import as_json, table, when
from client.session import Session, err, out

HEADERS = ["CLUSTER", "PARTITION", "GPU TYPE", "TOTAL", "IN USE", "IDLE", "UNAVAILABLE",
           "PENDING JOBS", "PENDING GPUs", "NODES"]  # fmt: skip


def _nodes(by_state: dict[str, int]) -> str:
    return ", ".join(f"{count} {state}" for state, count in by_state.items())


def _rows(cluster: dict[str, Any]) -> list[tuple]:
    rows = []
    for partition in cluster.get("partitions", []):
        gpus = partition["gpus"]
        types = ",".join(t["type"] or "gpu" for t in partition.get("gpu_types", []))
        rows.append(
            (cluster["cluster"], partition["name"], types, gpus["total"], gpus["in_use"],
             gpus["idle"], gpus["unavailable"], partition["pending_jobs"],
             partition["pending_gpus"], _nodes(partition.get("nodes_by_state", {})))
        )  # fmt: skip
    return rows


def stuck_lines(cluster: dict[str, Any]) -> list[str]:
    """What an allocation manager is warned of (the API sends ``stuck`` to them only)."""
    stuck = cluster.get("stuck") or {}
    lines = [
        f"{cluster['cluster']}: node {row['name']} has {row['stuck_gpus']} GPUs allocated to "
        f"no job (allocated {row['allocated_gpus']}, held by jobs {row['held_by_jobs']}) "
        f"since {when(row['since'])}"
        for row in stuck.get("nodes", [])
    ]
    if stuck.get("nodes") and stuck.get("waiting_count"):
        lines.append(
            f"{cluster['cluster']}: {stuck['waiting_count']} jobs pending longer than "
            f"{stuck['pending_bound_minutes']} minutes meanwhile"
        )
    return lines


def cmd_status(args: argparse.Namespace, session: Session) -> int:
    status = session.api.get("status/")
    if args.json:
        out(as_json(status))
        return Exit.OK
    clusters = status.get("clusters", [])
    if not clusters:
        err("No cluster has been read yet (are the portal's beat and worker running?).")
        return Exit.OK
    rows = [row for cluster in clusters for row in _rows(cluster)]
    out(table(HEADERS, rows, right=range(3, 9)))
    for cluster in clusters:
        line = f"{cluster['cluster']}: as of {when(cluster['taken_at'])}"
        if cluster.get("error"):
            line += f"; the last read failed at {when(cluster['error_at'])}: {cluster['error']}"
        out(line)
        for warning in stuck_lines(cluster):
            err(f"sgp: warning: {warning}")
    return Exit.OK
