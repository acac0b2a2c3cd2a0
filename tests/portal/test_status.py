"""The status page and ``GET /api/v1/status/``: made by the queue sync from one node and
one queue listing of the real dev cluster, stored, and read by every view without a
Slurm command; allocation managers alone see nodes, reasons and stuck GPUs."""

import datetime as dt

import pytest
from django.test import Client
from django.utils import timezone

from accounts.tokens import token_create
from clusters.models import ClusterStatus
from clusters.selectors import cluster_statuses
from clusters.slurm import client_for
from clusters.slurm.cli import CliClient
from clusters.slurm.parsing import expand_hostlist
from clusters.slurm.rest import RestClient
from clusters.slurm.states import SlurmJobState
from jobs.invariants import invariants_check
from jobs.queue_sync import queue_sync
from tests.factories import outside_job, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]


@pytest.fixture
def slurm_calls(monkeypatch) -> list[str]:
    """Every Slurm command or REST call made while it is installed (none may be)."""
    calls: list[str] = []
    real_run, real_streamed, real_send = CliClient._run, CliClient._streamed, RestClient._send

    def cli_run(self, argv, **kwargs):
        calls.append(" ".join(argv))
        return real_run(self, argv, **kwargs)

    def cli_streamed(self, argv):  # a command whose output is read as it prints (squeue)
        calls.append(" ".join(argv))
        return real_streamed(self, argv)

    def rest_send(self, method, path, **kwargs):
        calls.append(f"{method} {path}")
        return real_send(self, method, path, **kwargs)

    monkeypatch.setattr(CliClient, "_run", cli_run)
    monkeypatch.setattr(CliClient, "_streamed", cli_streamed)
    monkeypatch.setattr(RestClient, "_send", rest_send)
    return calls


@pytest.fixture
def running_job(dev_cluster, make_project, alice, workdir):
    """alice's 1-GPU job running on the dev cluster (cancelled at the end)."""
    project = make_project(members={alice: "pi"})
    client = client_for(dev_cluster)
    job_id = outside_job(client, project, workdir, name="status")

    def running():
        entry = next((e for e in client.queue() if e.job_id == job_id), None)
        return entry if entry and entry.state == SlurmJobState.RUNNING else None

    yield wait_for(running, timeout_s=60, what=f"Slurm job {job_id} to run")
    client.cancel(job_id, user="alice")


def test_the_queue_sync_stores_the_status_of_one_node_and_one_queue_listing(
    dev_cluster, running_job, slurm_calls
):
    queue_sync(cluster=dev_cluster)
    assert [call.split()[0] for call in slurm_calls] == ["squeue", "scontrol"]
    status = ClusterStatus.objects.get(cluster=dev_cluster)
    snapshot = status.snapshot
    assert status.error == "" and timezone.now() - status.taken_at < dt.timedelta(seconds=30)
    assert snapshot["gpus"]["total"] == 8
    gpus = snapshot["gpus"]
    assert gpus["in_use"] >= 1  # alice's job (other tests may run beside it)
    assert gpus["in_use"] + gpus["idle"] + gpus["unavailable"] == 8
    [node] = snapshot["nodes"]
    assert node["name"] in expand_hostlist(running_job.nodes)
    assert node["allocated_gpus"] == gpus["in_use"]
    assert {p["name"] for p in snapshot["partitions"]} == {"gpu", "debug"}
    # A normal running job is no false alarm.
    assert snapshot["stuck"]["seen"] == []

    # Within the status interval the next sync reads the queue only.
    del slurm_calls[:]
    queue_sync(cluster=dev_cluster)
    assert [call.split()[0] for call in slurm_calls] == ["squeue"]

    # The invariant check finds no stuck GPUs either.
    assert not [w for w in invariants_check(cluster=dev_cluster).warnings if w.name == "stuck-gpus"]


@pytest.fixture
def stored(dev_cluster) -> ClusterStatus:
    """A status with a stuck node (as the issue's restart left one) and a drained node."""
    since = (timezone.now() - dt.timedelta(minutes=5)).isoformat()
    counts = {"total": 16, "in_use": 8, "idle": 0, "unavailable": 8}
    snapshot = {
        "taken_at": timezone.now().isoformat(), "gpus": counts,
        "gpu_types": [{"type": "h200", **counts}],
        "nodes_by_state": {"mixed": 1, "drained": 1},
        "pending_jobs": 27, "pending_gpus": 27, "running_jobs": 0,
        "partitions": [{"name": "gpu", "gpus": counts, "gpu_types": [{"type": "h200", **counts}],
                        "nodes_by_state": {"mixed": 1, "drained": 1}, "pending_jobs": 27,
                        "pending_gpus": 27, "running_jobs": 0}],
        "nodes": [
            {"name": "vm", "partitions": ["gpu"], "state": "mixed", "states": ["mixed"],
             "reason": "", "gpus": 8, "gpus_by_type": {"h200": 8}, "allocated_gpus": 8,
             "cpus": 16, "allocated_cpus": 0},
            {"name": "vm2", "partitions": ["gpu"], "state": "drained", "states": ["idle", "drain"],
             "reason": "fan <b>broken</b>", "gpus": 8, "gpus_by_type": {"h200": 8},
             "allocated_gpus": 0, "cpus": 16, "allocated_cpus": 0},
        ],
        "stuck": {
            "seen": [], "gpus": 8, "pending_bound_minutes": 10, "waiting_count": 1,
            "nodes": [{"name": "vm", "allocated_gpus": 8, "held_by_jobs": 0, "stuck_gpus": 8,
                       "since": since}],
            "waiting_jobs": [{"job_id": 4242, "user": "olga", "account": "secret-acct",
                              "partition": "gpu", "reason": "ReqNodeNotAvail", "gpus": 1,
                              "submitted_at": since}],
        },
    }  # fmt: skip
    return ClusterStatus.objects.update_or_create(
        cluster=dev_cluster, defaults={"taken_at": timezone.now(), "snapshot": snapshot}
    )[0]


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_everyone_signed_in_sees_the_numbers_and_managers_the_nodes_and_stuck_gpus(
    stored, alice, manny, slurm_calls
):
    page = signed_in(alice).get("/status/").content.decode()
    assert 'data-figure="unavailable">8<' in page and 'data-figure="pending_jobs">27<' in page
    assert "Stuck GPUs" not in page and "vm2" not in page and "secret-acct" not in page
    page = signed_in(manny).get("/status/").content.decode()
    assert "Slurm counts 8 GPUs as allocated that no running job holds." in page
    assert "secret-acct" in page and "4242" in page
    assert "fan &lt;b&gt;broken&lt;/b&gt;" in page  # a reason is text, never markup

    mine = signed_in(alice).get("/api/v1/status/").json()
    [cluster] = mine["clusters"]
    assert cluster["gpus"]["unavailable"] == 8 and cluster["pending_jobs"] == 27
    assert "nodes" not in cluster and "stuck" not in cluster
    [managed] = signed_in(manny).get("/api/v1/status/").json()["clusters"]
    assert managed["stuck"]["nodes"][0]["stuck_gpus"] == 8
    assert "seen" not in managed["stuck"]
    assert [n["reason"] for n in managed["nodes"]] == ["", "fan <b>broken</b>"]
    assert slurm_calls == []  # the page and the API read the database only


def test_the_managers_page_lists_the_nodes_that_need_attention_unless_asked_for_all(
    stored, alice, manny
):
    snapshot = stored.snapshot
    busy = {**snapshot["nodes"][0], "name": "busy", "reason": ""}
    snapshot["nodes"].append(busy)  # allocated and held by its jobs: nothing to see
    stored.save()
    page = signed_in(manny).get("/status/").content.decode()
    listed = {n for n in ("vm", "vm2", "busy") if f'data-node="{n}"' in page}
    assert listed == {"vm", "vm2"}  # stuck GPUs; drained
    assert "2 of 3 nodes" in page
    page = signed_in(manny).get("/status/?nodes=all").content.decode()
    assert all(f'data-node="{n}"' in page for n in ("vm", "vm2", "busy"))
    assert "All 3 nodes." in page
    page = signed_in(alice).get("/status/?nodes=all").content.decode()
    assert "data-node=" not in page  # a researcher sees no node, whatever is asked

    def api_nodes(user, query=""):
        [cluster] = signed_in(user).get(f"/api/v1/status/{query}").json()["clusters"]
        return {node["name"] for node in cluster.get("nodes", [])}

    assert api_nodes(manny) == {"vm", "vm2"}  # the API bounds them as the page does
    assert api_nodes(manny, "?nodes=all") == {"vm", "vm2", "busy"}
    assert api_nodes(alice, "?nodes=all") == set()


def test_a_reader_who_may_not_see_the_nodes_does_not_fetch_them(stored):
    [status] = cluster_statuses(leaving_out=("nodes", "stuck"))
    assert "nodes" not in status.snapshot and "stuck" not in status.snapshot
    assert status.snapshot["pending_jobs"] == 27 and status.snapshot["partitions"]
    [whole] = cluster_statuses()
    assert whole.snapshot == stored.snapshot


def test_the_api_answers_a_token_and_refuses_anonymous(stored, alice):
    _, secret = token_create(user=alice, name="status")
    client = Client(headers={"Authorization": f"Bearer {secret}"})
    assert client.get("/api/v1/status/").status_code == 200
    assert Client().get("/api/v1/status/").status_code == 401
    assert Client().get("/status/").status_code == 302


def test_without_a_status_yet_the_page_says_so(dev_cluster, alice):
    ClusterStatus.objects.all().delete()
    page = signed_in(alice).get("/status/").content.decode()
    assert "No cluster has been read yet" in page
    assert signed_in(alice).get("/api/v1/status/").json() == {"clusters": []}
