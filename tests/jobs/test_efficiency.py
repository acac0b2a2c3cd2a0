"""A job's efficiency from its accounting records (jobs/efficiency.py), on its page and in
the API, and the project page's GPU-hours spent on jobs that did not succeed."""

import datetime as dt

import pytest
from django.test import Client

from accounts.services import membership_set
from clusters.models import Cluster
from clusters.slurm.states import SlurmJobState
from jobs.accounting import accounting_ingest
from jobs.efficiency import Efficiency, job_efficiency
from jobs.models import AccountingRecord, Job
from jobs.selectors import unsuccessful_charges
from tests.api.conftest import token_client
from tests.factories import project_with_allocation, recorded_cluster
from tests.jobs.test_accounting_ingest import NOW, entry, portal_job

GIB = 2**30


@pytest.fixture
def cluster(db):
    return recorded_cluster()


@pytest.fixture
def project(cluster, alice):
    return project_with_allocation(cluster, pi=alice)


def used(job_id: int, **fields):
    """An ended record: 4 CPUs for 10 minutes of a 10-minute limit, half of them busy,
    8 GiB at its peak of 16 GiB given."""
    values = {
        "allocated_cpus": 4,
        "elapsed_s": 600,
        "time_limit_minutes": 10,
        "mem_allocated_bytes": 16 * GIB,
        "cpu_time_s": 1200.0,
        "mem_peak_bytes": 8 * GIB,
        **fields,
    }
    return entry(job_id, **values)


def finished(job: Job) -> Job:
    return Job.objects.prefetch_related("accounting").get(pk=job.pk)


def test_the_ingest_keeps_the_usage_and_the_job_shows_it(cluster, project, alice):
    job = portal_job(project, cluster, alice, slurm_job_id=700)
    accounting_ingest(cluster=cluster, entries=[used(700)])
    record = AccountingRecord.objects.get(slurm_job_id=700)
    assert (record.cpu_time_s, record.mem_peak_bytes, record.time_limit_minutes) == (
        1200.0,
        8 * GIB,
        10,
    )
    efficiency = job_efficiency(finished(job))
    assert efficiency is not None
    assert efficiency.cpu_percent == 50  # 1200 s of 600 s x 4 CPUs
    assert efficiency.mem_percent == 50
    assert efficiency.time_percent == 100
    assert efficiency.gpu_util_percent is None  # not recorded: unknown, never 0
    assert not efficiency.asked_far_more_time and not efficiency.asked_far_more_memory
    # A later read (the overlap) with more known replaces, never adds.
    accounting_ingest(cluster=cluster, entries=[used(700, gpu_util_percent=0.0)])
    assert job_efficiency(finished(job)).gpu_util_percent == 0.0


def test_a_job_not_yet_charged_or_never_run_has_no_efficiency(cluster, project, alice):
    running = portal_job(project, cluster, alice, slurm_job_id=701)
    accounting_ingest(
        cluster=cluster,
        entries=[used(701, state=SlurmJobState.RUNNING, ended_at=None, exit_code=None)],
    )
    assert job_efficiency(finished(running)) is None
    never = portal_job(project, cluster, alice, slurm_job_id=702)
    accounting_ingest(
        cluster=cluster,
        entries=[entry(702, state=SlurmJobState.CANCELLED, elapsed_s=0, started_at=None)],
    )
    never = finished(never)
    assert never.is_finished and job_efficiency(never) is None


def test_far_more_time_and_memory_than_used_is_said_with_its_thresholds():
    def efficiency(**fields) -> Efficiency:
        values = {
            "tasks": 1, "elapsed_s": 12 * 60, "time_limit_s": 4 * 3600, "cpu_time_s": 700.0,
            "cpu_allocated_s": 720, "mem_peak_bytes": 2 * GIB, "mem_allocated_bytes": 64 * GIB,
            "gpu_util_percent": None, "gpu_mem_peak_bytes": None, "gpu_seconds": 720,
            "requested_gpu_hours": 4.0, **fields,
        }  # fmt: skip
        return Efficiency(**values)

    assert efficiency().asked_far_more_time and efficiency().asked_far_more_memory
    # Under a quarter used, but only minutes or a little memory to spare: nothing said.
    assert not efficiency(elapsed_s=60, time_limit_s=20 * 60).asked_far_more_time
    assert not efficiency(
        mem_peak_bytes=GIB // 2, mem_allocated_bytes=4 * GIB
    ).asked_far_more_memory
    # A quarter or more used: nothing said.
    assert not efficiency(elapsed_s=3600).asked_far_more_time
    assert not efficiency(mem_peak_bytes=16 * GIB).asked_far_more_memory
    # Not recorded: nothing said.
    assert not efficiency(mem_peak_bytes=None).asked_far_more_memory
    assert not efficiency(time_limit_s=None).asked_far_more_time


def test_an_arrays_tasks_are_summed(cluster, project, alice):
    job = portal_job(project, cluster, alice, slurm_job_id=710, array="0-2", tasks=3)
    tasks = [
        used(710, array_job_id=710, array_task="0", elapsed_s=300, cpu_time_s=1200.0),
        used(711, array_job_id=710, array_task="1", mem_peak_bytes=12 * GIB),
        used(712, array_job_id=710, array_task="2", mem_peak_bytes=None, cpu_time_s=None),
    ]
    accounting_ingest(cluster=cluster, entries=tasks)
    efficiency = job_efficiency(finished(job))
    assert efficiency.tasks == 3
    assert efficiency.elapsed_s == 600  # the longest task against the (shared) limit
    assert efficiency.cpu_time_s == 2400.0
    assert efficiency.cpu_allocated_s == (300 + 600 + 600) * 4
    assert efficiency.mem_peak_bytes == 12 * GIB  # the highest task's peak
    assert efficiency.gpu_seconds == 2 * 1500


def test_gpu_utilisation_is_weighted_by_gpu_time_where_recorded(cluster, project, alice):
    job = portal_job(project, cluster, alice, slurm_job_id=720, array="0-1", tasks=2)
    entries = [
        used(720, array_job_id=720, array_task="0", elapsed_s=300, gpu_util_percent=20.0),
        used(721, array_job_id=720, array_task="1", elapsed_s=900, gpu_util_percent=60.0),
    ]
    accounting_ingest(cluster=cluster, entries=entries)
    assert job_efficiency(finished(job)).gpu_util_percent == pytest.approx(50.0)


def test_the_job_page_shows_the_efficiency_and_what_asking_too_much_cost(
    cluster, project, alice, bob
):
    job = portal_job(project, cluster, alice, slurm_job_id=730)
    Job.objects.filter(pk=job.pk).update(time_limit_minutes=240)
    accounting_ingest(
        cluster=cluster,
        entries=[used(730, elapsed_s=720, time_limit_minutes=240, mem_peak_bytes=GIB)],
    )
    client = Client()
    client.force_login(alice)
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="job-efficiency"' in html
    assert "Efficiency" in html
    assert "<strong>42 %</strong>" in html  # 1200 CPU-s of 720 s x 4 CPUs
    assert "of a 4 h limit (5 %)" in html
    assert "Asked for 4 h, used 12 min" in html
    assert "Asked for 16.0\xa0GB of memory, peaked at 1.0\xa0GB" in html
    assert "not recorded by this cluster" in html  # GPU utilisation on fake GPUs
    assert "hx-select" not in html.split('id="job-efficiency"')[1].split(">")[0]  # done
    client.force_login(bob)
    assert client.get(f"/jobs/{job.pk}/").status_code == 404


def test_a_live_job_page_asks_again_for_the_efficiency(cluster, project, alice):
    job = portal_job(project, cluster, alice, slurm_job_id=731)
    client = Client()
    client.force_login(alice)
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    section = html.split('id="job-efficiency"')[1]
    assert 'hx-select="#job-efficiency"' in section.split(">")[0]
    assert "Shown when the job has ended" in section


def test_the_api_gives_the_efficiency_once_the_job_ended(cluster, project, alice):
    job = portal_job(project, cluster, alice, slurm_job_id=740)
    shown = token_client(alice).get(f"/api/v1/jobs/{job.pk}/").json()
    assert shown["efficiency"] is None
    accounting_ingest(cluster=cluster, entries=[used(740)])
    efficiency = token_client(alice).get(f"/api/v1/jobs/{job.pk}/").json()["efficiency"]
    assert efficiency["cpu_percent"] == 50 and efficiency["cpu_time_s"] == 1200.0
    assert efficiency["mem_peak_bytes"] == 8 * GIB and efficiency["mem_percent"] == 50
    assert efficiency["time_limit_s"] == 600 and efficiency["time_percent"] == 100
    assert efficiency["gpu_util_percent"] is None
    assert efficiency["asked_far_more_time"] is False


def test_the_project_page_sums_the_gpu_hours_of_jobs_that_did_not_succeed(cluster, project, alice):
    other = Cluster.objects.create(name="elsewhere")
    accounting_ingest(
        cluster=cluster,
        entries=[
            entry(801, state=SlurmJobState.FAILED, exit_code=1),  # 2 GPUs x 600 s x 1.5
            entry(802, state=SlurmJobState.CANCELLED),
            entry(803, state=SlurmJobState.TIMEOUT),
            entry(804),  # completed: not counted
            entry(805, state=SlurmJobState.FAILED, ended_at=NOW - dt.timedelta(days=3)),  # before
        ],
    )
    accounting_ingest(cluster=other, entries=[entry(801, state=SlurmJobState.FAILED)])
    allocation = project.allocations.get()
    assert unsuccessful_charges(allocation) == (3 * 1800, 3)
    client = Client()
    client.force_login(alice)
    html = client.get(f"/projects/{project.slug}/").content.decode()
    assert "1.50 GPU-h (15 % of the grant) went to 3 jobs that failed" in html
    membership_set(project=project, user=alice, role="member")  # members see it too
    assert "went to 3 jobs" in client.get(f"/projects/{project.slug}/").content.decode()
