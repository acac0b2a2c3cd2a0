"""/metrics: who may scrape it, and that what it answers is what the database holds and
what the portal's processes counted, added up over processes."""

import datetime as dt
import shutil
import struct
from pathlib import Path

import pytest
from django.conf import settings
from django.core.cache import cache
from django.test import override_settings
from django.utils import timezone
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from accounts.models import Allocation
from clusters.models import Cluster, RefusedRecord
from clusters.services import refused_records_report
from clusters.slurm.states import SlurmJobState
from clusters.slurm.types import QueueEntry, Refused
from jobs.invariants import LAST_CHECK_KEY, Findings, Violation, invariants_record
from jobs.models import ClusterSync, Job
from jobs.queue_sync import queue_apply
from jobs.states import JobState
from jobs.submission import job_submit
from portal.metric_files import metric_files, metric_files_process_dead, metric_files_reset
from portal.tasks import heartbeat_task
from tests.factories import bulk_jobs, project_with_allocation, recorded_cluster, wait_for
from tests.jobs.test_accounting_ingest import portal_job

TOKEN = "scrape-token-for-tests"
SCRAPER = {"HTTP_AUTHORIZATION": f"Bearer {TOKEN}"}
HEARTBEAT = "portal.tasks.heartbeat_task"
REFUSED = "portal_invariant_refused_records"
QUEUE, ACCOUNTING = RefusedRecord.Listing.QUEUE, RefusedRecord.Listing.ACCOUNTING


def parsed(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of an exposition: (name, labels) → value."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def listed(samples: dict, name: str, **labels: str) -> bool:
    return (name, frozenset(labels.items())) in samples


@pytest.fixture
def scrape(client, db):
    """scrape(): the samples /metrics answers the scraper (the token, from loopback)."""

    def read() -> dict:
        response = client.get("/metrics", **SCRAPER)
        assert response.status_code == 200, response.content
        return parsed(response.content.decode())

    with override_settings(METRICS_TOKEN=TOKEN, METRICS_ALLOWED_NETWORKS=[]):
        yield read


# --- who may scrape ------------------------------------------------------------------


@override_settings(METRICS_TOKEN="", METRICS_ALLOWED_NETWORKS=[])
def test_it_is_off_without_a_token_or_an_allow_list(client, db):
    assert client.get("/metrics").status_code == 404
    assert client.get("/metrics", **SCRAPER).status_code == 404


@override_settings(METRICS_TOKEN=TOKEN, METRICS_ALLOWED_NETWORKS=[])
def test_a_scrape_needs_the_token(client, db):
    refused = client.get("/metrics")
    assert refused.status_code == 401
    assert refused["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert b"portal_" not in refused.content
    for header in (f"Bearer {TOKEN}x", f"Basic {TOKEN}", TOKEN, "Bearer", f"Bearer {TOKEN[:-1]}"):
        assert client.get("/metrics", HTTP_AUTHORIZATION=header).status_code == 401, header
    allowed = client.get("/metrics", HTTP_AUTHORIZATION=f"bearer  {TOKEN}")
    assert allowed.status_code == 200
    assert allowed["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert allowed["Cache-Control"].startswith("max-age=0")
    assert value(parsed(allowed.content.decode()), "portal_database_up") == 1


@override_settings(METRICS_TOKEN="", METRICS_ALLOWED_NETWORKS=["10.1.0.0/16", "2001:db8::/32"])
def test_an_allow_list_admits_its_networks_alone(client, db):
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="::ffff:10.1.2.3").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="2001:db8::7").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="10.2.0.1").status_code == 403
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 403
    # Without a proxy in front, an X-Forwarded-For the client wrote proves nothing.
    forged = client.get("/metrics", REMOTE_ADDR="10.2.0.1", HTTP_X_FORWARDED_FOR="10.1.2.3")
    assert forged.status_code == 403


@override_settings(METRICS_TOKEN="", METRICS_ALLOWED_NETWORKS=["10.1.0.0/16"], PROXY_COUNT=1)
def test_behind_a_proxy_the_address_it_saw_counts(client, db):
    """nginx on the web host connects from 127.0.0.1 and appends the client's address."""
    through = {"REMOTE_ADDR": "127.0.0.1"}
    assert client.get("/metrics", HTTP_X_FORWARDED_FOR="10.1.0.9", **through).status_code == 200
    # The proxy appends what it saw to what the client sent: the last one counts.
    spoofed = client.get("/metrics", HTTP_X_FORWARDED_FOR="10.1.0.9, 192.0.2.1", **through)
    assert spoofed.status_code == 403
    assert client.get("/metrics", **through).status_code == 403  # the proxy itself


@override_settings(METRICS_TOKEN=TOKEN, METRICS_ALLOWED_NETWORKS=["10.1.0.0/16"])
def test_with_a_token_and_an_allow_list_a_scrape_needs_both(client, db):
    assert client.get("/metrics", REMOTE_ADDR="10.1.0.5", **SCRAPER).status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="10.1.0.5").status_code == 401
    assert client.get("/metrics", REMOTE_ADDR="192.0.2.1", **SCRAPER).status_code == 403


@override_settings(METRICS_TOKEN=TOKEN, METRICS_ALLOWED_NETWORKS=[])
def test_hostile_requests_get_no_error_and_no_other_answer(client, db):
    plain = client.get("/metrics", **SCRAPER).content.decode()
    names = {name for name, _ in parsed(plain)}
    for query in (
        "name[]=portal_jobs",
        "format=openmetrics",
        "debug=1&name[]=%00%ff",
        "x=" + "A" * 10_000,
        "%E2%80%AE=1;DROP TABLE jobs_job",
    ):
        response = client.get(f"/metrics?{query}", **SCRAPER)
        assert response.status_code == 200, query
        assert {name for name, _ in parsed(response.content.decode())} == names, query
    assert client.post("/metrics", **SCRAPER).status_code == 405
    assert client.delete("/metrics", **SCRAPER).status_code == 405
    head = client.head("/metrics", **SCRAPER)
    assert head.status_code == 200 and head.content == b""
    for header in ("Bearer \x00", "Bearer " + "é" * 50, "Bearer " + "x" * 100_000):
        assert client.get("/metrics", HTTP_AUTHORIZATION=header).status_code == 401


def test_a_metric_file_cut_short_is_a_503_not_an_error(scrape, client):
    broken = Path(settings.METRICS_DIR) / "broken"
    broken.mkdir()
    try:
        # Says 64 bytes are used; holds 8 (its disk filled up).
        (broken / "counter_1.db").write_bytes(struct.pack("i", 64) + bytes(4))
        answer = client.get("/metrics", **SCRAPER)
        assert answer.status_code == 503
        assert answer.content == b"The metric files cannot be read.\n"
    finally:
        shutil.rmtree(broken)
    assert scrape()


# --- what is: read from the database --------------------------------------------------


def test_jobs_by_state_waiting_submissions_and_lags_are_the_database_s(scrape, alice):
    cluster = recorded_cluster()
    project = project_with_allocation(cluster, pi=alice)
    made = {JobState.NEW: 2, JobState.PENDING: 3, JobState.RUNNING: 1, JobState.COMPLETED: 4}
    for state, count in made.items():
        bulk_jobs(
            owner=alice,
            project=project,
            count=count,
            state=state,
            partition=cluster.partitions.get(),
        )
    an_hour_ago = timezone.now() - dt.timedelta(hours=1)
    Job.objects.filter(state=JobState.NEW).update(created_at=an_hour_ago)
    ClusterSync.objects.create(
        cluster=cluster,
        queue_synced_at=timezone.now() - dt.timedelta(minutes=10),
        accounting_synced_at=timezone.now() - dt.timedelta(days=1),
    )
    samples = scrape()
    for state in ("new", "submitting", "pending", "running", "suspended"):
        assert value(samples, "portal_jobs", cluster="recorded", state=state) == made.get(
            JobState(state), 0
        ), state
    assert not listed(samples, "portal_jobs", cluster="recorded", state="completed")
    waited = value(samples, "portal_job_submission_oldest_waiting_seconds", cluster="recorded")
    assert 3600 <= waited < 3600 + 600
    assert 600 <= value(samples, "portal_queue_sync_lag_seconds", cluster="recorded") < 1200
    assert 86400 <= value(samples, "portal_accounting_lag_seconds", cluster="recorded") < 87000


def test_the_ledger_of_each_active_allocation_is_the_database_s(scrape, alice):
    cluster = recorded_cluster()
    project = project_with_allocation(cluster, pi=alice, gpu_hours=10)
    portal_job(project, cluster, alice, slurm_job_id=900)  # holds 0.5 GPU-hours
    allocation = Allocation.objects.get(project=project)
    labels = {"project": "vision", "cluster": "recorded", "allocation": str(allocation.pk)}
    samples = scrape()
    assert value(samples, "portal_allocation_granted_gpu_hours", **labels) == 10
    assert value(samples, "portal_allocation_held_gpu_hours", **labels) == 0.5
    assert value(samples, "portal_allocation_used_gpu_hours", **labels) == 0
    assert value(samples, "portal_allocation_available_gpu_hours", **labels) == 9.5
    Allocation.objects.filter(pk=allocation.pk).update(state=Allocation.State.EXPIRED)
    assert not listed(scrape(), "portal_allocation_granted_gpu_hours", **labels)


@pytest.mark.slurm
def test_slurm_reachability_is_the_last_probe_s(scrape, dev_cluster):
    assert value(scrape(), "portal_slurm_up", cluster="portal-dev", backend="cli") == 1
    dev_cluster.probe.probed_at = timezone.now() - dt.timedelta(hours=1)
    dev_cluster.probe.save()
    assert value(scrape(), "portal_slurm_up", cluster="portal-dev", backend="cli") == 0


def test_the_last_invariant_check_is_shown(scrape, db):
    invariants_record(Findings(violations=[Violation("ledger-drift", "allocation 1")], warnings=[]))
    samples = scrape()
    assert value(samples, "portal_invariant_violations") == 1
    assert value(samples, "portal_invariant_warnings") == 0
    checked = value(samples, "portal_invariants_checked_timestamp_seconds")
    assert abs(checked - timezone.now().timestamp()) < 60
    invariants_record(Findings())
    samples = scrape()
    assert listed(samples, "portal_invariant_violations")
    assert value(samples, "portal_invariant_violations") == 0
    cache.delete(LAST_CHECK_KEY)
    assert not listed(scrape(), "portal_invariant_violations")  # never checked


def test_records_refused_within_the_day_are_counted_by_cluster_and_listing(scrape, db):
    cluster = recorded_cluster()
    recorded_cluster("idle")  # none refused: listed with 0, so an alert sees it clear
    off = recorded_cluster("off")
    Cluster.objects.filter(pk=off.pk).update(is_enabled=False)
    unreadable = [
        Refused(job_id=job_id, problem="cannot read the record: 14 fields, not 15", text="\x1e")
        for job_id in (11, 12, 13)
    ]
    listed_twice = [Refused(job_id=7, problem="job 7 is listed 2 times", text="x")]
    for _ in range(2):  # listed again by the next ingest: still three records
        refused_records_report(cluster=cluster, listing=ACCOUNTING, refused=unreadable)
    refused_records_report(cluster=cluster, listing=QUEUE, refused=listed_twice)
    refused_records_report(cluster=off, listing=QUEUE, refused=listed_twice)
    samples = scrape()
    assert value(samples, REFUSED, cluster="recorded", listing="accounting") == 3
    assert value(samples, REFUSED, cluster="recorded", listing="queue") == 1
    assert listed(samples, REFUSED, cluster="idle", listing="queue")
    assert value(samples, REFUSED, cluster="idle", listing="queue") == 0
    assert not listed(samples, REFUSED, cluster="off", listing="queue")  # not read any more
    RefusedRecord.objects.filter(cluster=cluster, listing=QUEUE).update(
        last_seen_at=timezone.now() - dt.timedelta(days=1, minutes=1)
    )
    assert value(scrape(), REFUSED, cluster="recorded", listing="queue") == 0


# --- what happened: counted by the processes -------------------------------------------


def test_a_job_s_wait_in_the_queue_is_observed_when_it_starts(scrape, alice):
    cluster = recorded_cluster()
    project = project_with_allocation(cluster, pi=alice)
    job = portal_job(project, cluster, alice, slurm_job_id=901)
    now = timezone.now().replace(microsecond=0)
    Job.objects.filter(pk=job.pk).update(
        state=JobState.PENDING, submitted_at=now - dt.timedelta(minutes=3)
    )
    count = "portal_job_pending_seconds_count"
    before = scrape()
    started = QueueEntry(
        job_id=901, array_job_id=None, array_task=None, name="train", user="alice",
        account="vision", partition="gpu", state=SlurmJobState.RUNNING, reason="None",
        comment="", submitted_at=now, started_at=now, time_limit_minutes=10,
    )  # fmt: skip
    queue_apply(cluster=cluster, entries=[started])
    after = scrape()
    assert value(after, count, cluster="recorded") == value(before, count, cluster="recorded") + 1
    bucket = "portal_job_pending_seconds_bucket"
    for le, grew in (("60.0", 0), ("300.0", 1)):
        assert (
            value(after, bucket, cluster="recorded", le=le)
            - value(before, bucket, cluster="recorded", le=le)
            == grew
        ), le
    # Read again while it runs: it started once.
    queue_apply(cluster=cluster, entries=[started])
    assert value(scrape(), count, cluster="recorded") == value(after, count, cluster="recorded")


@pytest.mark.slurm
def test_a_submission_s_latency_is_observed_once(scrape, make_project, alice, workdir):
    from jobs.services import job_create
    from tests.factories import request_for

    project = make_project(members={alice: "pi"}, gpu_hours=1)
    job = job_create(user=alice, request=request_for(project, workdir))
    count = "portal_job_submission_seconds_count"
    before = value(scrape(), count, cluster="portal-dev")
    job_submit(job_id=job.pk)
    assert job_submit(job_id=job.pk) is None  # a second delivery: nothing to do
    assert value(scrape(), count, cluster="portal-dev") == before + 1


def test_failed_log_ins_are_counted_by_the_page_tried(scrape, client, alice):
    failures = "portal_login_failures_total"
    before = scrape()
    client.post("/login/", {"username": "alice", "password": "wrong"})
    client.post("/login/", {"username": "nobody", "password": "wrong"})
    client.post("/admin/login/", {"username": "alice", "password": "wrong"})
    client.post("/login/", {"username": "alice", "password": "alice-pass-1234"})  # no failure
    after = scrape()
    assert value(after, failures, source="web") == value(before, failures, source="web") + 2
    assert value(after, failures, source="admin") == value(before, failures, source="admin") + 1


def test_counts_of_a_worker_s_processes_and_of_this_one_add_up(scrape, celery_worker):
    queue, _ = celery_worker
    labels = {"task": HEARTBEAT, "outcome": "success"}
    before = value(scrape(), "portal_celery_tasks_total", **labels)
    for _ in range(3):
        heartbeat_task.delay()  # run by the worker's pool processes
    heartbeat_task.apply()  # run here
    heartbeat_task.apply()
    wait_for(
        lambda: value(scrape(), "portal_celery_tasks_total", **labels) >= before + 5,
        timeout_s=30,
        what="the worker's heartbeats to be counted",
    )
    assert value(scrape(), "portal_celery_tasks_total", **labels) == before + 5
    # The worker's part is in its own folder, written by its pool processes.
    worker_folder = Path(settings.METRICS_DIR) / queue
    merged = MultiProcessCollector.merge(metric_files(worker_folder), accumulate=True)
    worker_counts = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in merged
        for sample in family.samples
    }
    assert value(worker_counts, "portal_celery_tasks_total", **labels) >= 3


# --- the files' upkeep (gunicorn's hooks, the worker's start) ---------------------------


def test_a_service_starts_with_its_folder_emptied_and_an_ended_process_keeps_its_counts(
    monkeypatch, tmp_path
):
    # Nothing is counted meanwhile: prometheus_client would open its files there.
    folder = tmp_path / "web"
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(folder))
    metric_files_reset()  # made when missing
    for name in ("counter_41.db", "histogram_41.db", "gauge_livesum_41.db", "gauge_max_41.db"):
        (folder / name).write_bytes(b"")
    (folder / "gauge_livesum_42.db").write_bytes(b"")
    metric_files_process_dead(41)
    assert sorted(path.name for path in folder.iterdir()) == [
        "counter_41.db", "gauge_livesum_42.db", "gauge_max_41.db", "histogram_41.db",
    ]  # fmt: skip
    assert metric_files(tmp_path) == sorted(str(path) for path in folder.iterdir())
    metric_files_reset()
    assert list(folder.iterdir()) == []
