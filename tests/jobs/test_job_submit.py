"""job_submit on the live cluster: claimed once, submitted once, found again by its token."""

import datetime as dt
import subprocess

import pytest
from django.utils import timezone

from accounts.models import User
from accounts.selectors import project_balance
from clusters.slurm import client_for
from clusters.slurm.rest import RestClient
from jobs.control import job_control
from jobs.models import Job
from jobs.queue_sync import queue_sync
from jobs.services import job_cancel, job_create
from jobs.states import JobState
from jobs.submission import (
    ClaimedElsewhere,
    DependencyNotReady,
    job_submit,
    spec_of,
    submit_request,
)
from tests.conftest import through_slurmrestd
from tests.factories import request_for, slurm_ids_of, wait_for

pytestmark = pytest.mark.slurm


@pytest.fixture
def project(make_project, alice):
    return make_project(members={alice: "pi"}, gpu_hours=10)


def test_a_first_attempt_submits_once_and_records_the_slurm_id(project, alice, workdir):
    job = job_create(user=alice, request=request_for(project, workdir))
    job_submit(job_id=job.pk)
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert job.slurm_job_id is not None and job.submitted_at is not None
    assert [e.state for e in job.events.all()] == ["new", "submitting", "pending"]
    client = client_for(job.cluster)
    assert slurm_ids_of(job, client=client) == [job.slurm_job_id]
    # A second delivery of the same task finds nothing to do.
    assert job_submit(job_id=job.pk) is None
    assert slurm_ids_of(job, client=client) == [job.slurm_job_id]
    job.refresh_from_db()
    assert job.submit_attempts == 1


def test_a_retry_after_sbatch_reached_slurm_records_that_job_instead_of_submitting(
    project, alice, workdir
):
    job = job_create(user=alice, request=request_for(project, workdir))
    # An earlier attempt claimed the job, ran sbatch and died before recording the id.
    Job.objects.filter(pk=job.pk).update(
        state=JobState.SUBMITTING,
        submit_attempts=1,
        claimed_until=timezone.now() - dt.timedelta(seconds=1),
    )
    client = client_for(job.cluster)
    earlier = client.submit(
        submit_request(spec=spec_of(job), posix_user="alice", script=job.rendered_script)
    )
    job_submit(job_id=job.pk)
    job.refresh_from_db()
    assert job.slurm_job_id == earlier
    assert job.state == JobState.PENDING
    assert slurm_ids_of(job, client=client) == [earlier]


def test_a_job_still_new_since_long_ago_is_looked_up_before_its_first_submission(
    project, alice, workdir
):
    job = job_create(user=alice, request=request_for(project, workdir))
    # The row as a database restored from a dump taken an hour ago has it: saved then,
    # never claimed; a worker submitted it after the dump, and Slurm has that job.
    Job.objects.filter(pk=job.pk).update(created_at=timezone.now() - dt.timedelta(hours=1))
    job.refresh_from_db()
    client = client_for(job.cluster)
    earlier = client.submit(
        submit_request(spec=spec_of(job), posix_user="alice", script=job.rendered_script)
    )
    job_submit(job_id=job.pk)
    job.refresh_from_db()
    assert job.submit_attempts == 1
    assert job.slurm_job_id == earlier
    assert slurm_ids_of(job, client=client) == [earlier]


def test_a_job_claimed_by_a_live_attempt_is_left_alone(project, alice, workdir):
    job = job_create(user=alice, request=request_for(project, workdir))
    Job.objects.filter(pk=job.pk).update(
        state=JobState.SUBMITTING,
        submit_attempts=1,
        claimed_until=timezone.now() + dt.timedelta(seconds=30),
    )
    with pytest.raises(ClaimedElsewhere) as claimed:
        job_submit(job_id=job.pk)
    assert 25 < claimed.value.retry_in_s <= 31
    assert slurm_ids_of(job) == []


def test_slurms_refusal_is_final_keeps_its_message_and_releases_the_hold(
    make_project, alice, workdir
):
    # The reconciler never ran: Slurm has no such account and refuses the job.
    project = make_project(members={alice: "pi"}, gpu_hours=10, in_slurm=False)
    job = job_create(user=alice, request=request_for(project, workdir))
    assert project_balance(project).held_gpu_seconds > 0
    job_submit(job_id=job.pk)
    job.refresh_from_db()
    assert job.state == JobState.SUBMIT_FAILED
    assert "account" in job.submit_error.lower()
    assert job.slurm_job_id is None and job.ended_at is not None
    assert project_balance(project).held_gpu_seconds == 0
    assert job.events.last().state == JobState.SUBMIT_FAILED
    assert job_submit(job_id=job.pk) is None


@pytest.mark.parametrize(
    ("login", "says"),
    [
        ("root", "Jobs never run as the system account 'root'"),
        (
            "daemon",
            "The Unix login 'daemon' is a system account on the host that submits jobs (uid 1",
        ),
        ("no-such-login", "The Unix login 'no-such-login' does not exist on the host"),
    ],
)
def test_the_worker_refuses_a_job_whose_owner_maps_to_a_system_or_unknown_login(
    project, alice, workdir, login, says
):
    job = job_create(user=alice, request=request_for(project, workdir))
    # Set behind the console's back (the database, an identity provider): the worker
    # trusts neither, and checks the name against its own host's user database.
    User.objects.filter(pk=alice.pk).update(posix_username=login)
    job_submit(job_id=job.pk)
    job.refresh_from_db()
    assert job.state == JobState.SUBMIT_FAILED
    assert says in job.submit_error
    assert job.events.last().detail.startswith(says[:20])
    assert job.slurm_job_id is None
    assert project_balance(project).held_gpu_seconds == 0
    assert job.comment not in comments_in_slurm()


@pytest.mark.parametrize("field", ["working_directory", "output_path"])
def test_the_worker_refuses_a_job_whose_path_leads_out_of_the_owners_folders_by_now(
    project, alice, workdir, tmp_path, field
):
    # Checked when it was saved, then swapped for a symbolic link out of alice's folders
    # (and the web tier, as its own user, could not have looked inside her home anyway).
    folder = workdir / "data"
    folder.mkdir()
    path = str(folder) if field == "working_directory" else f"{folder}/out-%j.txt"
    job = job_create(user=alice, request=request_for(project, workdir, **{field: path}))
    assert project_balance(project).held_gpu_seconds > 0
    folder.rmdir()
    folder.symlink_to(tmp_path)
    job_submit(job_id=job.pk)
    job.refresh_from_db()
    assert job.state == JobState.SUBMIT_FAILED
    assert f"'{path}' is outside your allowed folders" in job.submit_error
    assert "symbolic link" in job.submit_error
    assert job.slurm_job_id is None
    assert project_balance(project).held_gpu_seconds == 0
    assert job.comment not in comments_in_slurm()


def comments_in_slurm() -> str:
    """Every job's comment that Slurm knows of today, whoever's (running or ended)."""
    return subprocess.run(
        ["sacct", "--allusers", "-X", "-n", "-P", "-o", "comment", "-S", "now-1days"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_the_lowest_uid_jobs_may_run_as_is_a_setting(project, alice, workdir, settings):
    settings.MIN_UID = 1002  # alice is uid 1001 on the dev host
    job = job_create(user=alice, request=request_for(project, workdir))
    job_submit(job_id=job.pk)
    job.refresh_from_db()
    assert job.state == JobState.SUBMIT_FAILED
    assert "PORTAL_MIN_UID=1002" in job.submit_error


def test_a_dependent_job_waits_for_its_dependency_and_slurm_is_told(project, alice, workdir):
    first = job_create(user=alice, request=request_for(project, workdir, name="first"))
    second = job_create(
        user=alice, request=request_for(project, workdir, name="second", depends_on=(first.pk,))
    )
    with pytest.raises(DependencyNotReady):
        job_submit(job_id=second.pk)
    job_submit(job_id=first.pk)
    job_submit(job_id=second.pk)
    first.refresh_from_db()
    second.refresh_from_db()
    assert second.state == JobState.PENDING
    assert f"--dependency=afterok:{first.slurm_job_id}" in second.rendered_script


def test_a_job_cancelled_before_a_worker_took_it_never_reaches_slurm(project, alice, workdir):
    job = job_create(user=alice, request=request_for(project, workdir))
    job_cancel(user=alice, job=job)
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert project_balance(project).held_gpu_seconds == 0
    assert job_submit(job_id=job.pk) is None
    assert slurm_ids_of(job) == []


def test_cancelling_a_queued_job_scancels_it_and_the_sync_sees_it(
    project, alice, bob, workdir, django_capture_on_commit_callbacks
):
    job = job_create(
        user=alice, request=request_for(project, workdir, script="sleep 60\n", name="long")
    )
    job_submit(job_id=job.pk)
    job.refresh_from_db()
    with pytest.raises(Exception, match="owner"):
        job_cancel(user=bob, job=job)  # bob is not in the project
    with django_capture_on_commit_callbacks() as callbacks:
        job_cancel(user=alice, job=job)
    assert len(callbacks) == 1  # the cancel task, enqueued on commit
    job_control(job_id=job.pk, action="cancel")

    def cancelled():
        queue_sync(cluster=job.cluster)
        job.refresh_from_db()
        return job.state == JobState.CANCELLED

    wait_for(cancelled, timeout_s=30, what="the queue to show the job cancelled")


def test_jobs_submitted_through_slurmrestd_share_the_processs_client(
    project, alice, workdir, dev_cluster, monkeypatch
):
    # Found by bench/submit.py --backend rest: each submission made a client of its own,
    # which asked slurmrestd for its whole OpenAPI document (and opened a connection and
    # minted a token) before every job: 4 times the CPU of the cli's submission.
    through_slurmrestd(dev_cluster)
    asked: list[str] = []
    send = RestClient._send

    def counted(self, method, path, **kwargs):
        asked.append(path)
        return send(self, method, path, **kwargs)

    monkeypatch.setattr(RestClient, "_send", counted)
    jobs = [job_create(user=alice, request=request_for(project, workdir)) for _ in range(3)]
    for job in jobs:
        job_submit(job_id=job.pk)
    assert [job.state for job in Job.objects.filter(pk__in=[j.pk for j in jobs])] == [
        JobState.PENDING
    ] * 3
    assert len([path for path in asked if path.endswith("/job/submit")]) == 3
    # At most once in this process (none when an earlier test's submission asked).
    assert asked.count("/openapi/v3") <= 1
