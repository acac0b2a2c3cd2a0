"""A cluster's status from one node and one queue listing (``clusters.status``): on the
listings recorded from both Slurm versions and both backends, and on constructed ones
for what the dev clusters cannot safely be made to do (a drained node, GPUs stuck)."""

import datetime as dt
import json
from pathlib import Path

import pytest

from clusters.slurm.parsing import parse_scontrol_nodes, parse_squeue
from clusters.slurm.rest_parsing import parse_nodes, parse_queue
from clusters.slurm.states import SlurmJobState
from clusters.slurm.types import NodeInfo, QueueEntry
from clusters.status import array_task_count, node_condition, status_snapshot, stuck_gpus

FIXTURES = Path(__file__).parent.parent / "fixtures"
NOW = dt.datetime(2026, 12, 4, 6, 0, tzinfo=dt.UTC)
BOUND = dt.timedelta(minutes=10)


def printed(name: str) -> bytes:
    """A cli recording as the tool printed it (squeue's, bytes: the parser takes them)."""
    return (FIXTURES / "cli" / name).read_bytes()


def cli(name: str) -> str:
    return printed(name).decode(errors="replace")


def rest(name: str) -> dict:
    return json.loads((FIXTURES / "slurmrestd" / name).read_text())


# Recorded (tests/fixtures/*/README.md) with alice's job running with 2 GPUs, one pending
# for every GPU of the node (Resources), a pending array of 4 such tasks: the REST ones on
# 2026-12-04, when on portal-dev another test's 1-GPU job ran beside them; the cli ones
# on 2026-12-06, in squeue's fixed-width format.
RECORDED = {
    "22.05 cli": lambda: (parse_scontrol_nodes(cli("scontrol-nodes.txt")),
                          parse_squeue(printed("squeue-status.txt"))),
    "24.11 cli": lambda: (parse_scontrol_nodes(cli("scontrol-nodes-24.11.txt")),
                          parse_squeue(printed("squeue-status-24.11.txt"))),
    "22.05 rest": lambda: (parse_nodes(rest("nodes_status.json")),
                           parse_queue(rest("jobs_status.json"))),
    "24.11 rest": lambda: (parse_nodes(rest("24.11/nodes_status-v0.0.42.json")),
                           parse_queue(rest("24.11/jobs_status-v0.0.42.json"))),
}  # fmt: skip


@pytest.mark.parametrize("listing", RECORDED)
def test_the_recorded_queue_carries_priority_forecast_gpus_and_nodes(listing):
    nodes, queue = RECORDED[listing]()
    mine = {e.job_id: e for e in queue if e.account == "rec21"}
    running, waiting, array = (mine[i] for i in sorted(mine))
    node = nodes[0].name
    gpus_per_node = nodes[0].gpus
    assert running.state == SlurmJobState.RUNNING
    assert (running.gpus, running.nodes, running.expected_start_at) == (2, node, None)
    assert running.started_at is not None and running.priority > 0
    assert waiting.state == SlurmJobState.PENDING and waiting.reason == "Resources"
    assert (waiting.gpus, waiting.nodes, waiting.started_at) == (gpus_per_node, "", None)
    # Slurm's forecast of when the GPUs free up.
    assert running.started_at < waiting.expected_start_at
    assert array_task_count(array.array_task) == 4  # "0-3%1" (squeue, rest)
    assert array.gpus == gpus_per_node


@pytest.mark.parametrize("listing", RECORDED)
def test_the_recorded_cluster_s_status(listing):
    nodes, queue = RECORDED[listing]()
    [node] = nodes
    assert node_condition(node.states) == "mixed"
    held = sum(e.gpus for e in queue if e.state == SlurmJobState.RUNNING)
    snapshot = status_snapshot(nodes=nodes, queue=queue, now=NOW, pending_bound=BOUND)
    total, in_use = node.gpus, node.allocated_gpus
    assert snapshot["gpus"] == {"total": total, "in_use": in_use, "idle": total - in_use,
                                "unavailable": 0}  # fmt: skip
    # Every allocated GPU was a running job's; the REST recordings keep the test's own
    # jobs only, so another test's job on portal-dev shows as one poll's stuck GPU there.
    seen = [row["stuck_gpus"] for row in snapshot["stuck"]["seen"]]
    assert seen == ([in_use - held] if in_use > held else [])
    assert listing == "22.05 rest" or not seen
    [gpu_type] = snapshot["gpu_types"]
    assert gpu_type == {"type": {8: "h200", 4: "b200"}[total], **snapshot["gpus"]}
    # The node is in both partitions: each counts its GPUs.
    assert [p["name"] for p in snapshot["partitions"]] == sorted(node.partitions)
    for partition in snapshot["partitions"]:
        assert partition["gpus"] == snapshot["gpus"]
        assert partition["nodes_by_state"] == {"mixed": 1}
    mine = [e for e in queue if e.account == "rec21" and e.state == SlurmJobState.PENDING]
    pending = {p["name"]: p for p in snapshot["partitions"]}[mine[0].partition]
    assert pending["pending_jobs"] >= 1 + 4  # the waiting job and the array's four tasks
    assert pending["pending_gpus"] >= 5 * total
    assert snapshot["stuck"]["nodes"] == []  # one poll confirms nothing


def node(name="gpu01", states=("idle",), gpus=8, allocated=0, partitions=("gpu",), reason=""):
    return NodeInfo(name, partitions, states, reason, (("h200", gpus),), allocated, 16, 0)


def job(job_id, state="RUNNING", gpus=1, nodes="gpu01", submitted=NOW, partition="gpu"):
    return QueueEntry(
        job_id, None, None, "j", "alice", "acct", partition, SlurmJobState(state), "None", "",
        submitted, None, 60, 1, None, gpus, nodes if state != "PENDING" else "",
    )  # fmt: skip


def test_the_issue_s_stuck_gpus_are_reported_from_the_second_poll_with_the_waiting_jobs():
    """Slurm 22.05 after a slurmctld restart: AllocTRES=gres/gpu=8, CPUAlloc=0, no job
    running on the node, 27 jobs pending with ReqNodeNotAvail."""
    [stuck] = parse_scontrol_nodes(
        "NodeName=vm Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=16 CPUTot=16 "
        "Gres=gpu:h200:8 NodeAddr=127.0.0.1 OS=Linux 6.1 #1 SMP State=MIXED "
        "Partitions=gpu,debug CfgTRES=cpu=16,mem=125G,billing=16,gres/gpu=8 "
        "AllocTRES=gres/gpu=8 CapWatts=n/a\n"
    )
    old = NOW - dt.timedelta(minutes=30)
    waiting = [
        job(100 + n, "PENDING", submitted=old if n < 27 else NOW, partition="gpu")
        for n in range(30)
    ]
    waiting = [entry._replace(reason="ReqNodeNotAvail") for entry in waiting]
    first = status_snapshot(nodes=[stuck], queue=waiting, now=NOW, pending_bound=BOUND)
    assert first["gpus"] == {"total": 8, "in_use": 8, "idle": 0, "unavailable": 0}
    # One poll could have caught a job between its start and the queue listing.
    assert [row["stuck_gpus"] for row in first["stuck"]["seen"]] == [8]
    assert first["stuck"]["nodes"] == [] and first["stuck"]["waiting_count"] == 0

    later = NOW + dt.timedelta(seconds=10)
    second = status_snapshot(
        nodes=[stuck], queue=waiting, now=later, pending_bound=BOUND, previous=first
    )
    [row] = second["stuck"]["nodes"]
    assert row == {"name": "vm", "allocated_gpus": 8, "held_by_jobs": 0, "stuck_gpus": 8,
                   "since": NOW.isoformat()}  # fmt: skip
    assert second["stuck"]["gpus"] == 8
    assert second["stuck"]["waiting_count"] == 27  # the three submitted just now are not late
    assert {w["reason"] for w in second["stuck"]["waiting_jobs"]} == {"ReqNodeNotAvail"}

    # After `scontrol reconfigure` the node reads idle: the alert clears.
    fixed = stuck._replace(allocated_gpus=0, states=("idle",))
    third = status_snapshot(
        nodes=[fixed], queue=waiting, now=later, pending_bound=BOUND, previous=second
    )
    assert third["stuck"]["nodes"] == [] and third["gpus"]["idle"] == 8


def test_gpus_held_by_jobs_on_compressed_node_lists_are_not_stuck():
    nodes = [
        node(f"gpu{n:02d}", ("mixed",), allocated=a) for n, a in ((1, 4), (2, 4), (3, 2), (5, 3))
    ]
    queue = [
        job(1, gpus=8, nodes="gpu[01-02]"),  # 4 per node
        job(2, gpus=2, nodes="gpu03"),
        job(3, gpus=2, nodes="gpu05"),
        job(4, "COMPLETED", gpus=1, nodes="gpu05"),  # ended: holds nothing
    ]
    assert stuck_gpus(nodes, queue) == {"gpu05": (3, 2)}
    queue.append(job(5, "COMPLETING", gpus=1, nodes="gpu05"))  # still releasing its GPU
    assert stuck_gpus(nodes, queue) == {}


def test_a_node_running_a_job_whose_gpus_squeue_does_not_show_is_not_judged():
    """sbatch --gpus=2 (per job): squeue's %b says N/A, so the listing cannot tell what the
    job holds; the node is left out rather than reported stuck on a guess."""
    [per_job] = [e for e in parse_squeue(printed("squeue.txt")) if e.name == "perjob"]
    assert (per_job.gpus, per_job.gpus_known, per_job.nodes) == (0, False, "vm")
    nodes = [node("vm", ("mixed",), allocated=2), node("other", ("mixed",), allocated=2)]
    assert stuck_gpus(nodes, [per_job]) == {"other": (2, 0)}


def test_gpus_of_down_drained_and_reserved_nodes_are_unavailable():
    nodes = [
        node("a", ("idle",)),
        node("b", ("mixed", "drain"), allocated=2, reason="bad fan"),  # draining
        node("c", ("idle", "drain")),  # drained
        node("d", ("down", "not_responding")),
        node("e", ("idle", "reserved"), partitions=("gpu", "debug")),
        node("f", ("allocated",), allocated=8),
    ]
    snapshot = status_snapshot(
        nodes=nodes, queue=[job(1, gpus=2, nodes="b"), job(2, gpus=8, nodes="f")],
        now=NOW, pending_bound=BOUND,
    )  # fmt: skip
    assert snapshot["gpus"] == {"total": 48, "in_use": 10, "idle": 8, "unavailable": 30}
    assert snapshot["nodes_by_state"] == {
        "allocated": 1, "idle": 1, "draining": 1, "drained": 1, "reserved": 1, "down": 1
    }  # fmt: skip
    debug = {p["name"]: p for p in snapshot["partitions"]}["debug"]
    assert debug["gpus"] == {"total": 8, "in_use": 0, "idle": 0, "unavailable": 8}
    assert {row["name"]: row["reason"] for row in snapshot["nodes"]}["b"] == "bad fan"
    assert snapshot["stuck"]["seen"] == []


def test_queue_depth_counts_pending_array_tasks_and_each_partition_asked_for():
    queue = [
        job(1, "PENDING", gpus=2, partition="gpu,debug"),
        job(2, "PENDING", gpus=1)._replace(array_job_id=2, array_task="[4-9%2]"),
        job(3, gpus=1),
    ]
    snapshot = status_snapshot(nodes=[node()], queue=queue, now=NOW, pending_bound=BOUND)
    assert (snapshot["pending_jobs"], snapshot["pending_gpus"], snapshot["running_jobs"]) == (
        7,
        8,
        1,
    )
    partitions = {p["name"]: p for p in snapshot["partitions"]}
    assert (partitions["gpu"]["pending_jobs"], partitions["gpu"]["pending_gpus"]) == (7, 8)
    assert (partitions["debug"]["pending_jobs"], partitions["debug"]["pending_gpus"]) == (1, 2)


@pytest.mark.parametrize(
    ("spec", "count"),
    [(None, 1), ("3", 1), ("[4-9%2]", 6), ("[1,3,5]", 3), ("[0-9:2]", 5), ("[0-3,7]", 5)],
)
def test_a_pending_array_counts_its_tasks(spec, count):
    assert array_task_count(spec) == count
