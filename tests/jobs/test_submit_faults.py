"""Faults during submission, for real: Slurm's controller down, a worker killed, Redis down.

Each ends with every job in Slurm exactly once: none lost, none duplicated.
"""

import stat
import subprocess

import pytest

from clusters.slurm import client_for
from jobs.models import Job
from jobs.services import job_create
from jobs.states import JobState
from jobs.tasks import submissions_sweep_task
from tests.conftest import REPO, redis_shutdown, running_worker
from tests.factories import request_for, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


def stack(*arguments: str) -> None:
    subprocess.run([str(REPO / "dev" / "stack"), *arguments], check=True, capture_output=True)


def in_slurm(cluster, account: str) -> dict[str, list[int]]:
    """Slurm job ids by comment, for the account's jobs (queue and accounting)."""
    client = client_for(cluster)
    found: dict[str, set[int]] = {}
    for entry in client.queue():
        if entry.account == account:
            found.setdefault(entry.comment, set()).add(entry.job_id)
    for record in client.accounting_since(cluster.created_at):
        if record.account == account and record.comment:
            found.setdefault(record.comment, set()).add(record.job_id)
    return {comment: sorted(ids) for comment, ids in found.items()}


def quick_job(project, workdir, index: int):
    return request_for(project, workdir, name=f"fault{index}", gpus_per_node=0, script="true\n")


@pytest.mark.exclusive  # it stops slurmctld, which every other test shares
def test_jobs_created_while_slurmctld_is_down_reach_slurm_once_each(
    celery_worker, make_project, dev_cluster, alice, workdir
):
    project = make_project(members={alice: "pi"})
    stack("stop", "slurmctld")
    try:
        jobs = [job_create(user=alice, request=quick_job(project, workdir, i)) for i in range(50)]
        ids = [job.pk for job in jobs]
        wait_for(
            lambda: Job.objects.filter(pk__in=ids, reason__startswith="Slurm is not").exists(),
            timeout_s=60,
            what="a submission to find Slurm unreachable",
        )
        assert not Job.objects.filter(pk__in=ids, slurm_job_id__isnull=False).exists()
    finally:
        stack("start", "slurmctld")
    wait_for(
        lambda: Job.objects.filter(pk__in=ids, slurm_job_id__isnull=False).count() == 50,
        timeout_s=240,
        interval_s=2,
        what="all 50 jobs to be submitted once slurmctld is back",
    )
    assert not Job.objects.filter(pk__in=ids, state=JobState.SUBMIT_FAILED).exists()
    tokens = {job.comment: job for job in Job.objects.filter(pk__in=ids)}
    seen = in_slurm(dev_cluster, project.slurm_account)
    assert set(seen) == set(tokens), "every job reached Slurm"
    for comment, slurm_ids in seen.items():
        assert slurm_ids == [tokens[comment].slurm_job_id], f"{comment} is in Slurm once"


@pytest.fixture
def killing_prefix(tmp_path):
    """A run-as prefix that kills the worker process calling it right after its first
    successful sbatch: the worker dies between sbatch and recording the job id."""
    mark = tmp_path / "killed"
    wrapper = tmp_path / "runas-then-kill"
    wrapper.write_text(
        "#!/bin/bash\n"
        "user=$1; shift\n"
        'runuser -u "$user" -- "$@"\n'
        "status=$?\n"
        'if [[ $1 == *sbatch && " $* " != *" --test-only "* && $status == 0 ]] &&\n'
        f"   [[ ! -e {mark} ]]; then\n"
        f"  touch {mark}\n"
        "  kill -9 $PPID\n"
        "fi\n"
        "exit $status\n"
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return f"{wrapper} {{user}}", mark


def test_a_worker_killed_after_sbatch_does_not_cause_a_second_submission(
    killing_prefix, make_project, dev_cluster, alice, workdir
):
    prefix, mark = killing_prefix
    project = make_project(members={alice: "pi"})
    with running_worker(
        PORTAL_SLURM_RUN_AS_PREFIX=prefix,
        PORTAL_SLURM_COMMAND_TIMEOUT_S="5",
        PORTAL_JOB_SUBMIT_CLAIM_S="20",  # the shortest jobs.E001 allows with that timeout
    ):
        job = job_create(user=alice, request=quick_job(project, workdir, 0))
        wait_for(mark.exists, timeout_s=60, what="the worker to run sbatch and be killed")
        job.refresh_from_db()
        assert job.slurm_job_id is None  # it died before recording the id
        wait_for(
            lambda: Job.objects.get(pk=job.pk).slurm_job_id,
            timeout_s=120,
            what="the redelivered task to find the job by its token",
        )
    job.refresh_from_db()
    assert job.state != JobState.SUBMIT_FAILED
    assert job.submit_attempts >= 2
    assert in_slurm(dev_cluster, project.slurm_account) == {job.comment: [job.slurm_job_id]}


@pytest.mark.exclusive  # it stops Redis, which every other test shares
def test_a_job_saved_while_redis_is_down_is_submitted_when_it_returns(
    celery_worker, make_project, dev_cluster, alice, workdir
):
    project = make_project(members={alice: "pi"})
    redis_shutdown()
    try:
        job = job_create(user=alice, request=quick_job(project, workdir, 0))
        job.refresh_from_db()
        assert job.state == JobState.NEW  # saved and held, though nothing could be enqueued
    finally:
        stack("start", "redis")

    def swept_and_submitted():
        submissions_sweep_task()  # what beat runs every 30 s
        return Job.objects.get(pk=job.pk).slurm_job_id

    wait_for(swept_and_submitted, timeout_s=120, interval_s=3, what="the sweeper to submit it")
    job.refresh_from_db()
    assert in_slurm(dev_cluster, project.slurm_account) == {job.comment: [job.slurm_job_id]}
