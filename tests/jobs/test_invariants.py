"""The invariant check finds each kind of violation, planted for real, and calls a sound
portal sound."""

import datetime as dt
import os
import subprocess
import sys
import uuid

import pytest
from django.core.cache import cache
from django.db import connection
from django.db.models import F
from django.utils import timezone

from accounts.ledger import ledger_release
from accounts.models import Allocation, Project
from clusters.models import Cluster, RefusedRecord
from clusters.services import refused_records_report
from clusters.slurm import client_for
from clusters.slurm.states import SlurmJobState
from clusters.slurm.types import Refused
from jobs.invariants import LAST_CHECK_KEY, Findings, invariants_check, invariants_last
from jobs.models import Job
from jobs.services import job_create
from jobs.states import JobState
from jobs.submission import job_submit
from tests.conftest import REPO
from tests.factories import request_for, run_to_the_end, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]


def names(violations) -> set[str]:
    return {violation.name for violation in violations}


def quick(project, workdir, **fields):
    return request_for(project, workdir, **{"gpus_per_node": 1, "script": "true\n", **fields})


def submitted(alice, project, workdir, **fields) -> Job:
    job = job_create(user=alice, request=quick(project, workdir, **fields))
    job_submit(job_id=job.pk)
    job.refresh_from_db()
    assert job.slurm_job_id is not None
    return job


def sbatch_by_hand(project, comment: str, *, user: str = "alice") -> int:
    """A job sbatched by hand, past the portal, as the owner (or a teammate) would."""
    result = subprocess.run(
        ["runuser", "-u", user, "--", "sbatch", "--parsable",
         f"--account={project.slurm_account}", "--partition=debug", "--chdir=/tmp",
         "--output=/dev/null", f"--comment={comment}", "--wrap=true"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return int(result.stdout.strip().split(";")[0])


@pytest.fixture
def project(make_project, alice):
    return make_project(members={alice: "pi"})


def test_a_settled_portal_is_sound(dev_cluster, project, alice, workdir):
    finished = run_to_the_end(submitted(alice, project, workdir))
    assert finished.used_gpu_seconds is not None
    submitted(alice, project, workdir, script="sleep 5\n")  # pending or running
    job_create(user=alice, request=quick(project, workdir))  # new: not in Slurm yet, fine
    assert invariants_check(cluster=dev_cluster) == Findings()
    assert invariants_check() == Findings()  # every enabled cluster


def test_it_reports_cached_totals_that_differ_from_the_ledger(dev_cluster, project):
    assert invariants_check(cluster=dev_cluster) == Findings()
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE accounts_allocation SET used_gpu_seconds = used_gpu_seconds + 7 "
            "WHERE project_id = %s",
            [project.pk],
        )
    violations = invariants_check(cluster=dev_cluster).violations
    assert names(violations) == {"ledger-drift"}
    assert "used_gpu_seconds is 7 on the row, 0 in the ledger" in violations[0].detail


def test_it_reports_a_refused_job_that_kept_its_hold(dev_cluster, project, alice, workdir):
    job = job_create(user=alice, request=quick(project, workdir))
    Job.objects.filter(pk=job.pk).update(state=JobState.SUBMIT_FAILED)  # no release
    violations = invariants_check(cluster=dev_cluster).violations
    assert names(violations) == {"hold-open"}
    assert f"job {job.pk} (submit_failed)" in violations[0].detail


def test_it_reports_a_charge_the_ledger_does_not_have(dev_cluster, project, alice, workdir):
    job = run_to_the_end(submitted(alice, project, workdir))
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE jobs_accountingrecord SET charged_gpu_seconds = charged_gpu_seconds + 60 "
            "WHERE job_id = %s",
            [job.pk],
        )
    violations = invariants_check(cluster=dev_cluster).violations
    assert names(violations) == {"charge-mismatch"}
    assert len(violations) == 2  # the record against the ledger, the job against its record


def test_it_reports_a_running_job_slurm_never_had(dev_cluster, project, alice, workdir):
    never = job_create(user=alice, request=quick(project, workdir))
    Job.objects.filter(pk=never.pk).update(state=JobState.RUNNING, slurm_job_id=987654321)
    without_id = job_create(user=alice, request=quick(project, workdir))
    Job.objects.filter(pk=without_id.pk).update(state=JobState.PENDING)
    violations = invariants_check(cluster=dev_cluster).violations
    assert names(violations) == {"missing-in-slurm"}
    assert sorted(v.detail.split()[1] for v in violations) == sorted(
        [str(never.pk), str(without_id.pk)]
    )


def test_it_reports_a_job_waiting_too_long_to_be_submitted(dev_cluster, project, alice, workdir):
    job_create(user=alice, request=quick(project, workdir))
    assert invariants_check(cluster=dev_cluster) == Findings()
    stuck = invariants_check(cluster=dev_cluster, stuck_after=dt.timedelta(0)).violations
    assert names(stuck) == {"submission-stuck"}


def test_it_reports_a_second_slurm_job_with_a_jobs_token(dev_cluster, project, alice, workdir):
    job = submitted(alice, project, workdir)
    assert invariants_check(cluster=dev_cluster) == Findings()
    second = sbatch_by_hand(project, job.comment)
    violations = invariants_check(cluster=dev_cluster).violations
    assert names(violations) == {"duplicate-in-slurm"}
    assert f"{job.slurm_job_id}, {second}" in violations[0].detail


def test_it_warns_of_a_slurm_job_with_a_token_no_job_has(dev_cluster, project):
    # Anyone can write a made-up token into a comment: listed, but the check passes.
    token = uuid.uuid4()
    slurm_job_id = sbatch_by_hand(project, f"portal:{token}")
    findings = invariants_check(cluster=dev_cluster)
    assert findings.violations == []
    assert names(findings.warnings) == {"unknown-token"}
    assert (
        f"Slurm job {slurm_job_id} of alice under {project.slurm_account} carries token {token}"
        in findings.warnings[0].detail
    )


def test_it_reports_a_job_slurm_has_though_the_portal_says_it_was_refused(
    dev_cluster, project, alice, workdir
):
    job = submitted(alice, project, workdir)
    Job.objects.filter(pk=job.pk).update(state=JobState.SUBMIT_FAILED, slurm_job_id=None)
    # The hold went back, as a refusal would: only the Slurm side is wrong.
    ledger_release(reference=job.hold_reference)
    violations = invariants_check(cluster=dev_cluster).violations
    assert names(violations) == {"orphan-in-slurm"}
    assert f"token of job {job.pk}, which is submit_failed" in violations[0].detail


def test_it_ignores_portal_tokens_on_jobs_of_accounts_that_are_not_projects(
    dev_cluster, make_project, alice
):
    # Another portal (or another test database) shares the cluster: its accounts are not ours.
    other = make_project(members={alice: "pi"})
    sbatch_by_hand(other, f"portal:{uuid.uuid4()}")
    Project.objects.filter(pk=other.pk).update(slurm_account="elsewhere")
    assert invariants_check(cluster=dev_cluster) == Findings()


def check_invariants(*, cluster: str | None = "portal-dev") -> subprocess.CompletedProcess:
    db = connection.settings_dict
    env = {
        **os.environ,
        "PORTAL_DATABASE_URL": f"postgresql://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
    }
    only = ["--cluster", cluster] if cluster else []
    return subprocess.run(
        [sys.executable, "manage.py", "check_invariants", *only],
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_the_command_exits_0_when_sound_and_1_with_the_violations(dev_cluster, project):
    clean = check_invariants()
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "No invariant violations." in clean.stdout
    allocation = Allocation.objects.get(project=project)
    Allocation.objects.filter(pk=allocation.pk).update(held_gpu_seconds=F("held_gpu_seconds") + 1)
    found = check_invariants()
    assert found.returncode == 1
    assert (
        f"ledger-drift: allocation {allocation.pk}: held_gpu_seconds is 1 on the row, "
        "0 in the ledger"
    ) in found.stdout


@pytest.mark.django_db(transaction=True)
def test_the_command_keeps_the_outcome_of_a_check_of_every_cluster_for_the_metrics(
    dev_cluster, project
):
    cache.delete(LAST_CHECK_KEY)
    assert check_invariants().returncode == 0
    assert invariants_last() is None  # one cluster's check says nothing of the others
    allocation = Allocation.objects.get(project=project)
    Allocation.objects.filter(pk=allocation.pk).update(held_gpu_seconds=F("held_gpu_seconds") + 1)
    assert check_invariants(cluster=None).returncode == 1
    last = invariants_last()
    assert last is not None
    assert (last["violations"], last["warnings"]) == (1, 0)
    cache.delete(LAST_CHECK_KEY)


@pytest.mark.django_db(transaction=True)
def test_the_command_lists_a_forged_token_as_a_warning_and_exits_0(
    dev_cluster, make_project, alice, bob, workdir
):
    # bob, alice's teammate, copies her job's token from the queue onto a job of his own:
    # any researcher can, so it must not make the check fail.
    project = make_project(members={alice: "pi", bob: "member"})
    job = submitted(alice, project, workdir)
    forged = sbatch_by_hand(project, job.comment, user="bob")
    found = check_invariants()
    assert found.returncode == 0, found.stdout + found.stderr
    account = project.slurm_account
    assert (
        f"warning: forged-token: Slurm job {forged} of bob under {account} carries the token "
        f"of job {job.pk} of alice under {account}; charged as work outside the portal\n"
    ) in found.stdout
    assert found.stdout.endswith("No invariant violations.\n")


# --- records Slurm listed that the portal refused ----------------------------------------


def held_by_hand(project) -> int:
    """A job alice sbatched by hand, held: it stays in the queue until cancelled."""
    result = subprocess.run(
        ["runuser", "-u", "alice", "--", "sbatch", "--parsable", "--hold",
         f"--account={project.slurm_account}", "--partition=debug", "--chdir=/tmp",
         "--output=/dev/null", "--wrap=true"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return int(result.stdout.strip().split(";")[0])


@pytest.fixture
def listed_twice(dev_cluster, project, tmp_path):
    """(the dev cluster, a held Slurm job of alice's) with the cluster's tools run through a
    command prefix after which squeue lists that job's record a second time, as a forged
    job name once made it: Slurm's own output, one record repeated."""
    slurm_job_id = held_by_hand(project)
    wrapper = tmp_path / "squeue-lists-one-job-twice"
    wrapper.write_text(
        "#!/bin/sh\n"
        '"$@" || exit\n'
        f'if [ "$1" = squeue ]; then exec "$@" --jobs={slurm_job_id}; fi\n'
    )  # fmt: skip
    wrapper.chmod(0o755)
    Cluster.objects.filter(pk=dev_cluster.pk).update(
        command_prefix=str(wrapper), run_as_prefix="runuser -u {user} --"
    )
    dev_cluster.refresh_from_db()
    yield dev_cluster, slurm_job_id
    subprocess.run(["scancel", str(slurm_job_id)], check=False)


def refused_warnings(findings: Findings) -> list[str]:
    return [w.detail for w in findings.warnings if w.name == "refused-record"]


def test_a_job_the_check_finds_twice_in_the_queue_is_a_warning_not_a_missing_job(
    listed_twice, project, alice, workdir
):
    cluster, slurm_job_id = listed_twice
    job = job_create(user=alice, request=quick(project, workdir))
    Job.objects.filter(pk=job.pk).update(state=JobState.PENDING, slurm_job_id=slurm_job_id)
    assert not RefusedRecord.objects.exists()  # no sync kept it: the check read it itself
    findings = invariants_check(cluster=cluster)
    assert findings.violations == []  # Slurm has the job: its records were refused
    assert refused_warnings(findings) == [
        f"portal-dev: Slurm job {slurm_job_id} in the queue listing is refused: listed 2 "
        "times; none of them is taken; not applied or charged"
    ]


def test_a_record_both_read_and_kept_by_a_sync_is_one_warning_saying_how_often(listed_twice):
    cluster, slurm_job_id = listed_twice
    for _ in range(2):  # two queue syncs
        refused = client_for(cluster).queue().refused
        refused_records_report(
            cluster=cluster, listing=RefusedRecord.Listing.QUEUE, refused=refused
        )
    kept = RefusedRecord.objects.get()
    assert (kept.slurm_job_id, kept.times_seen) == (slurm_job_id, 2)
    assert refused_warnings(invariants_check(cluster=cluster)) == [
        f"portal-dev: Slurm job {slurm_job_id} in the queue listing is refused: listed 2 "
        "times; none of them is taken; seen 2 times since "
        f"{kept.first_seen_at:%Y-%m-%d %H:%M:%S} UTC; not applied or charged"
    ]


def test_refused_records_a_sync_kept_within_the_day_are_warnings_and_older_ones_are_not(
    dev_cluster, project
):
    listed_twice = Refused(
        job_id=4242,
        problem="job 4242 is listed 2 times; none of them is taken",
        text="QueueEntry(job_id=4242, name='x\\ny')",
    )
    unreadable = Refused(
        job_id=None, problem="cannot read the record: 14 fields, not 15", text="\x1e\x1f"
    )
    for _ in range(3):
        refused_records_report(
            cluster=dev_cluster, listing=RefusedRecord.Listing.QUEUE, refused=[listed_twice]
        )
    refused_records_report(
        cluster=dev_cluster, listing=RefusedRecord.Listing.QUEUE, refused=[unreadable]
    )
    findings = invariants_check(cluster=dev_cluster)
    assert findings.violations == []
    warned = refused_warnings(findings)
    assert len(warned) == 2
    assert warned[1].startswith(
        "portal-dev: Slurm job 4242 in the queue listing is refused: job 4242 is listed 2 "
        "times; none of them is taken; seen 3 times since "
    )
    assert warned[0].startswith(
        "portal-dev: a record without a job id in the queue listing is refused: cannot "
        "read the record: 14 fields, not 15; seen once since "
    )
    RefusedRecord.objects.update(last_seen_at=timezone.now() - dt.timedelta(days=2))
    assert invariants_check(cluster=dev_cluster) == Findings()


def test_a_requeued_jobs_runs_carrying_its_token_are_the_job_itself(
    dev_cluster, project, alice, workdir
):
    job = submitted(alice, project, workdir, script="sleep 60\n")
    client = client_for(dev_cluster)

    def running() -> bool:
        return any(
            e.job_id == job.slurm_job_id and e.state == SlurmJobState.RUNNING
            for e in client.queue()
        )

    wait_for(running, what=f"Slurm job {job.slurm_job_id} to run")
    # Its owner may requeue it (turning requeue on first, if the portal turned it off).
    for command in (["update", f"jobid={job.slurm_job_id}", "requeue=1"],
                    ["requeue", str(job.slurm_job_id)]):  # fmt: skip
        subprocess.run(["runuser", "-u", "alice", "--", "scontrol", *command], check=True)
    try:
        wait_for(
            lambda: any(
                run.job_id == job.slurm_job_id and run.state == SlurmJobState.REQUEUED
                for run in client.accounting_since(dev_cluster.created_at)
            ),
            what=f"accounting to list the first run of Slurm job {job.slurm_job_id}",
        )
        # As if Slurm had run it again long after the portal recorded its id: every run
        # of that id is the job's own, not a copy of its token.
        earlier = dt.timedelta(minutes=10)
        Job.objects.filter(pk=job.pk).update(
            state=JobState.RUNNING,
            created_at=F("created_at") - earlier,
            submitted_at=F("submitted_at") - earlier,
        )
        assert invariants_check(cluster=dev_cluster) == Findings()
        never = job_create(user=alice, request=quick(project, workdir))
        Job.objects.filter(pk=never.pk).update(state=JobState.RUNNING, slurm_job_id=987654321)
        violations = invariants_check(cluster=dev_cluster).violations
        assert [(v.name, v.detail.split()[1]) for v in violations] == [
            ("missing-in-slurm", str(never.pk))
        ]
    finally:
        client.cancel(job.slurm_job_id, user="alice")
