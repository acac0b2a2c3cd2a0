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

from accounts.ledger import ledger_release
from accounts.models import Allocation, Project
from jobs.invariants import LAST_CHECK_KEY, Findings, invariants_check, invariants_last
from jobs.models import Job
from jobs.services import job_create
from jobs.states import JobState
from jobs.submission import job_submit
from tests.conftest import REPO
from tests.factories import request_for, run_to_the_end

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
