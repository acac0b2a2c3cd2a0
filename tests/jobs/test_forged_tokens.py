"""A submit token copied from the queue bills nobody but the forger.

Every researcher can run sbatch on a login node and read every job's comment
(``squeue --all -o %k``), so the ``portal:<token>`` in alice's job is theirs to
copy. bob (alice's teammate) and olga (another project) each run a 2-GPU job
under their own account with alice's token: while her job is queued, after it
ended, and while its Slurm id is not recorded yet (its worker died after sbatch);
alice herself copies it onto a job on the project's other cluster. Each time
alice's job keeps its own Slurm id, state and charge, the forged work is charged
like any work outside the portal, to the account (and cluster) it ran under, and
the invariant check lists it as a warning without failing. Through both backends.
"""

import datetime as dt
import subprocess
import uuid
from contextlib import contextmanager

import pytest
from django.utils import timezone

from accounts.models import LedgerEntry
from accounts.services import user_create
from clusters.prefixes import run_as_prefix_argv, run_as_prefix_template
from clusters.slurm import client_for
from jobs.accounting import accounting_sync
from jobs.invariants import invariants_check
from jobs.models import AccountingRecord, Job
from jobs.queue_sync import queue_sync
from jobs.services import job_create
from jobs.states import JobState
from jobs.submission import job_submit
from tests.conftest import through_slurmrestd
from tests.factories import request_for, run_to_the_end, slurm_ids_of, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def olga(db):
    return user_create(username="olga", password="olga-pass-1234", posix_username="olga")


@pytest.fixture(params=["cli", "rest"])
def setting(request, make_project, dev_cluster, alice, bob, olga):
    """Vision Lab (alice PI, bob member) and Genomics (olga PI) in Slurm, reached through
    the backend under test (the projects' limits are set through the CLI first: 22.05's
    REST API cannot set them)."""
    vision = make_project(members={alice: "pi", bob: "member"})
    genomics = make_project(members={olga: "pi"})
    cluster = through_slurmrestd(dev_cluster) if request.param == "rest" else dev_cluster
    return cluster, vision, genomics


def sbatch_as(user: str, account: str, comment: str, *, seconds: int = 2, on_next=None) -> int:
    """What a researcher can do on a login node: a 2-GPU job with any comment, on
    portal-dev, or on portal-next (``on_next``, its cluster) in its short partition."""
    run_as, partition = ["runuser", "-u", user, "--"], "debug"
    if on_next is not None:
        run_as = run_as_prefix_argv(run_as_prefix_template(on_next.run_as_prefix), user)
        partition = "short"
    result = subprocess.run(
        [*run_as, "sbatch", "--parsable", f"--account={account}",
         f"--partition={partition}", "--gpus-per-node=2", "--time=2", "--chdir=/tmp",
         "--output=/dev/null", f"--comment={comment}", f"--wrap=sleep {seconds}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, f"sbatch as {user}: {result.stderr}"
    return int(result.stdout.strip().split(";")[0])


def alices_job(vision, workdir, alice, *, seconds: int) -> Job:
    """Saved, not submitted: each test submits it (or not) itself, so a worker of the
    session must not take it first."""
    request = request_for(vision, workdir, script=f"sleep {seconds}\n", name="alices")
    with nobody_takes_submissions():
        return job_create(user=alice, request=request)


@contextmanager
def nobody_takes_submissions():
    """Jobs created meanwhile are enqueued where no worker listens."""
    from portal.celery import app

    listened = app.conf.task_default_queue
    app.conf.task_default_queue = f"unheard-{uuid.uuid4().hex[:8]}"
    try:
        yield
    finally:
        app.conf.task_default_queue = listened


def forge(job: Job, vision, genomics) -> dict[str, int]:
    return {
        "bob": sbatch_as("bob", vision.slurm_account, job.comment),
        "olga": sbatch_as("olga", genomics.slurm_account, job.comment),
    }


def charged_as_outside_work(cluster, forged: dict[str, int], projects: dict) -> None:
    """Each forged job's record belongs to no portal job and its charge went to the
    allocation of the project it ran under, on the forger's name."""

    def all_charged():
        accounting_sync(cluster=cluster)
        return AccountingRecord.objects.filter(
            cluster=cluster, slurm_job_id__in=forged.values(), charged_gpu_seconds__gt=0
        ).count() == len(forged)

    wait_for(all_charged, timeout_s=90, interval_s=1, what="the forged jobs to be charged")
    for user, slurm_job_id in forged.items():
        record = AccountingRecord.objects.get(cluster=cluster, slurm_job_id=slurm_job_id)
        assert record.job_id is None, f"{user}'s job was bound to a portal job"
        charge = LedgerEntry.objects.get(
            kind="charge", reference__startswith=f"{cluster.name}:{slurm_job_id}@"
        )
        assert charge.allocation.project == projects[user]
        assert charge.allocation.cluster == cluster
        assert charge.user.username == user
        assert -charge.gpu_seconds == record.charged_gpu_seconds


def own_warnings(findings) -> list:
    """The warnings of a check but those on the cluster's nodes: a job of a test beside
    this one that ends or is requeued leaves its GPUs allocated for a moment
    (``stuck-gpus``)."""
    return [w for w in findings.warnings if not w.name.startswith("stuck-gpus")]


def assert_warned_not_failed(cluster, job: Job, forged: dict[str, int]) -> None:
    findings = invariants_check(cluster=cluster)
    assert findings.violations == []
    warnings = [str(w) for w in own_warnings(findings)]
    assert len(warnings) == 1 and warnings[0].startswith("forged-token: "), warnings
    for user, slurm_job_id in forged.items():
        assert str(slurm_job_id) in warnings[0] and user in warnings[0]
    assert f"the token of job {job.pk} of alice" in warnings[0]


def assert_charged_only_its_own(job: Job) -> None:
    own = AccountingRecord.objects.filter(job=job)
    assert {r.slurm_job_id for r in own} == {job.slurm_job_id}
    assert job.used_gpu_seconds == sum(r.charged_gpu_seconds for r in own)
    charges = LedgerEntry.objects.filter(
        kind="charge", reference__startswith=f"{job.cluster.name}:{job.slurm_job_id}@"
    )
    assert [-c.gpu_seconds for c in charges] == [job.used_gpu_seconds]


def test_a_token_forged_while_the_job_is_queued_bills_only_the_forgers(
    setting, alice, bob, olga, workdir
):
    cluster, vision, genomics = setting
    # Alice's job lasts until the forgers' jobs are charged, however long a busy machine
    # takes: it ends when the test says so.
    request = request_for(
        vision, workdir, script="while [ ! -e go ]; do sleep 1; done\n", name="alices"
    )
    with nobody_takes_submissions():
        job = job_create(user=alice, request=request)
    job_submit(job_id=job.pk)
    job.refresh_from_db()
    own_id = job.slurm_job_id
    assert own_id is not None
    forged = forge(job, vision, genomics)

    charged_as_outside_work(cluster, forged, {"bob": vision, "olga": genomics})
    job.refresh_from_db()
    assert job.slurm_job_id == own_id
    assert job.state in (JobState.PENDING, JobState.RUNNING)
    assert job.used_gpu_seconds is None
    assert_warned_not_failed(cluster, job, forged)

    (workdir / "go").touch()
    job = run_to_the_end(job)
    assert job.state == JobState.COMPLETED and job.slurm_job_id == own_id
    assert_charged_only_its_own(job)
    assert_warned_not_failed(cluster, job, forged)


def test_a_token_forged_after_the_job_ended_bills_only_the_forgers(
    setting, alice, bob, olga, workdir
):
    cluster, vision, genomics = setting
    job = alices_job(vision, workdir, alice, seconds=1)
    job_submit(job_id=job.pk)
    job = run_to_the_end(job)
    before = (job.slurm_job_id, job.state, job.used_gpu_seconds, job.ended_at)
    forged = forge(job, vision, genomics)

    charged_as_outside_work(cluster, forged, {"bob": vision, "olga": genomics})
    job.refresh_from_db()
    assert (job.slurm_job_id, job.state, job.used_gpu_seconds, job.ended_at) == before
    assert_charged_only_its_own(job)
    assert_warned_not_failed(cluster, job, forged)


def test_a_forged_job_is_never_taken_for_one_whose_id_was_not_recorded(
    setting, alice, bob, olga, workdir
):
    """The worker claimed alice's job and died before sbatch: the only jobs with her token
    are the forgers'. Neither the accounting ingest nor the submission's retry takes
    one of them for hers; the retry submits her job itself."""
    cluster, vision, genomics = setting
    job = alices_job(vision, workdir, alice, seconds=1)
    Job.objects.filter(pk=job.pk).update(
        state=JobState.SUBMITTING, submit_attempts=1, claimed_until=timezone.now()
    )
    forged = forge(job, vision, genomics)
    charged_as_outside_work(cluster, forged, {"bob": vision, "olga": genomics})
    job.refresh_from_db()
    assert job.slurm_job_id is None and job.state == JobState.SUBMITTING

    assert slurm_ids_of(job) == []
    job_submit(job_id=job.pk)
    job.refresh_from_db()
    assert job.slurm_job_id is not None and job.slurm_job_id not in forged.values()
    assert slurm_ids_of(job) == [job.slurm_job_id]
    job = run_to_the_end(job)
    assert job.state == JobState.COMPLETED
    assert_charged_only_its_own(job)
    assert_warned_not_failed(cluster, job, forged)


def test_the_owners_own_copy_of_her_token_later_is_a_warning_too(setting, alice, workdir):
    """alice herself can sbatch with her job's token after the portal submitted it; it
    bills her own project, and the check, which cannot tell her copy from a second
    submission only within the submission's own minutes, does not fail for it."""
    cluster, vision, _ = setting
    job = alices_job(vision, workdir, alice, seconds=1)
    job_submit(job_id=job.pk)
    job = run_to_the_end(job)
    # The portal submitted it ten minutes ago: a copy now cannot be its submission.
    earlier = timezone.now() - dt.timedelta(minutes=10)
    Job.objects.filter(pk=job.pk).update(created_at=earlier, submitted_at=earlier)
    copy = sbatch_as("alice", vision.slurm_account, job.comment)
    charged_as_outside_work(cluster, {"alice": copy}, {"alice": vision})
    assert_warned_not_failed(cluster, job, {"alice": copy})
    queue_sync(cluster=cluster)
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED


@pytest.mark.parametrize("backend", ["cli", "rest"])
def test_a_token_copied_onto_a_job_on_the_projects_other_cluster_binds_nothing(
    make_project, dev_cluster, next_cluster, alice, workdir, backend
):
    """alice's job on portal-dev was claimed and its worker died before sbatch. alice
    herself, under the same account, sbatches a job with its token on portal-next, where
    the project has an allocation too: owner, account and time all match, only the
    cluster does not. Neither cluster's ingest nor the retry takes it for her job; it is
    charged to the project's portal-next allocation and listed as a forged token there."""
    vision = make_project(members={alice: "pi"}, clusters=(dev_cluster, next_cluster))
    if backend == "rest":  # after the limits were set through the CLI (see ``setting``)
        through_slurmrestd(dev_cluster)
        through_slurmrestd(next_cluster)
    job = alices_job(vision, workdir, alice, seconds=1)
    assert job.cluster == dev_cluster
    Job.objects.filter(pk=job.pk).update(
        state=JobState.SUBMITTING, submit_attempts=1, claimed_until=timezone.now()
    )
    copy = sbatch_as("alice", vision.slurm_account, job.comment, on_next=next_cluster)
    # On portal-next the copy passes for her submission in all but the cluster.
    assert slurm_ids_of(job, client=client_for(next_cluster)) == [copy]

    charged_as_outside_work(next_cluster, {"alice": copy}, {"alice": vision})
    accounting_sync(cluster=dev_cluster)
    job.refresh_from_db()
    assert job.slurm_job_id is None and job.state == JobState.SUBMITTING
    assert_warned_not_failed(next_cluster, job, {"alice": copy})
    (warning,) = own_warnings(invariants_check(cluster=next_cluster))
    assert f"of alice under {vision.slurm_account} on portal-dev;" in warning.detail
    assert own_warnings(invariants_check(cluster=dev_cluster)) == []

    assert slurm_ids_of(job) == []
    job_submit(job_id=job.pk)
    job.refresh_from_db()
    assert job.slurm_job_id is not None and slurm_ids_of(job) == [job.slurm_job_id]
    job = run_to_the_end(job)
    assert job.state == JobState.COMPLETED and job.cluster == dev_cluster
    assert_charged_only_its_own(job)
    assert AccountingRecord.objects.get(cluster=next_cluster, slurm_job_id=copy).job_id is None
    assert_warned_not_failed(next_cluster, job, {"alice": copy})
