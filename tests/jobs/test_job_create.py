"""job_create: checked, rendered, priced, held and saved in one transaction; submitted on commit."""

import math
import os
import threading
from decimal import Decimal

import pytest
from django.test import override_settings

from accounts import ledger
from accounts.errors import QuotaExceeded
from accounts.models import LedgerEntry
from accounts.selectors import project_balance
from jobs.errors import JobInvalid
from jobs.models import Job, JobTemplate
from jobs.requests import JobRequest
from jobs.services import estimates_paused_key, job_create, job_estimate
from jobs.states import JobState
from tests.factories import blocked_on_a_lock, in_thread, request_for
from tests.jobs.test_forged_tokens import nobody_takes_submissions

pytestmark = pytest.mark.slurm


@pytest.fixture
def project(make_project, alice, bob):
    return make_project(members={alice: "pi", bob: "member"}, gpu_hours=10, in_slurm=False)


def held(project) -> int:
    return project_balance(project).held_gpu_seconds


def test_it_saves_the_job_holds_its_hours_and_enqueues_it_on_commit(
    project, alice, workdir, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        job = job_create(
            user=alice, request=request_for(project, workdir, gpus_per_node=2, array="0-3")
        )
    job.refresh_from_db()
    assert job.state == JobState.NEW
    assert job.owner == alice and job.project == project
    # 1 node x 2 GPUs x 5 minutes x 4 tasks x weight 1, plus its one CPU at 0.01 a CPU-hour.
    assert job.requested_gpu_seconds == 2 * 5 * 60 * 4 + 5 * 60 * 4 // 100
    assert job.cpu_hour_rate == Decimal("0.01")
    assert held(project) == job.requested_gpu_seconds
    assert LedgerEntry.objects.get(kind="hold", reference=job.hold_reference).user == alice
    assert f"#SBATCH --account={project.slurm_account}" in job.rendered_script
    assert f"--comment=portal:{job.submit_token}" in job.rendered_script
    assert job.rendered_script.rstrip().endswith("echo hello from $(id -un)")
    assert [e.state for e in job.events.all()] == [JobState.NEW]
    assert len(callbacks) == 1


def test_the_account_and_user_come_from_the_database(project, alice, workdir):
    job = job_create(user=alice, request=request_for(project, workdir))
    assert job.owner.posix_username == "alice"
    assert f"--account={project.slurm_account}" in job.rendered_script


def test_it_refuses_a_job_over_budget_and_holds_nothing(project, alice, workdir):
    # 10 GPU-hours granted; 1 GPU for 11 hours is more (the gpu partition allows 7 days).
    with pytest.raises(QuotaExceeded) as refusal:
        job_create(
            user=alice,
            request=request_for(project, workdir, partition="gpu", time_limit_minutes=11 * 60),
        )
    assert refusal.value.requested_gpu_hours == 11.11  # and its CPU: 11 x 0.01
    assert refusal.value.available_gpu_hours == 10
    assert not Job.objects.exists()
    assert held(project) == 0


def test_it_refuses_a_project_the_user_is_not_a_member_of(project, charlie, workdir):
    with pytest.raises(JobInvalid) as refusal:
        job_create(user=charlie, request=request_for(project, workdir))
    assert "project" in refusal.value.fields
    assert not Job.objects.exists()


def test_it_refuses_an_unknown_partition_naming_the_known_ones(project, alice, workdir):
    with pytest.raises(JobInvalid) as refusal:
        job_create(user=alice, request=request_for(project, workdir, partition="nope"))
    assert "debug" in refusal.value.fields["partition"][0]
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"script": "echo hi\n#SBATCH --gres=gpu:8\n"}, "script"),
        ({"script": "echo hi\n  #  sbatch --account=other\n"}, "script"),
        ({"script": "#SbAtCh -A other\n"}, "script"),
        ({"name": "a\nb"}, "name"),
        ({"name": "x;rm -rf ~"}, "name"),
        ({"name": "$(whoami)"}, "name"),
        ({"working_directory": "/home/alice/../bob"}, "working_directory"),
        ({"working_directory": "/etc"}, "working_directory"),
        ({"output_path": "../../../etc/passwd"}, "output_path"),
        ({"gpus_per_node": 0 - 1}, "gpus_per_node"),
        ({"gpus_per_node": 10**9}, "gpus_per_node"),
        ({"gpus_per_node": 9}, "gpus_per_node"),
        ({"time_limit_minutes": 0}, "time_limit_minutes"),
        ({"time_limit_minutes": -5}, "time_limit_minutes"),
        ({"time_limit_minutes": 61}, "time_limit_minutes"),  # debug allows one hour
        ({"nodes": 2}, "nodes"),  # the dev cluster has one node
        ({"environment": {"SLURM_JOB_ACCOUNT": "other"}}, "environment"),
        ({"environment": {"OK": "line\nbreak"}}, "environment"),
        ({"array": "0-100000"}, "array"),
        ({"array": "0-3;ls"}, "array"),
        ({"script": "x" * (300 * 1024)}, "script"),
        ({"depends_on": (999999,)}, "depends_on"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_nothing_is_held(
    project, alice, workdir, fields, field
):
    with pytest.raises(JobInvalid) as refusal:
        job_create(user=alice, request=request_for(project, workdir, **fields))
    assert field in refusal.value.fields, refusal.value.fields
    assert all(refusal.value.fields[field]), "every error says what to fix"
    assert not Job.objects.exists()
    assert held(project) == 0


def test_a_symlink_escaping_home_is_refused(project, alice, workdir):
    link = workdir / "escape"
    os.symlink("/etc", link)
    with pytest.raises(JobInvalid) as refusal:
        job_create(user=alice, request=request_for(project, workdir, working_directory=str(link)))
    assert "working_directory" in refusal.value.fields
    with pytest.raises(JobInvalid) as refusal:
        job_create(user=alice, request=request_for(project, workdir, output_path=f"{link}/out.log"))
    assert "output_path" in refusal.value.fields
    assert not Job.objects.exists()


def test_a_user_without_a_unix_login_is_told_to_ask_for_one(project, alice, workdir):
    alice.posix_username = None
    alice.save()
    with pytest.raises(JobInvalid, match="Unix login"):
        job_create(user=alice, request=request_for(project, workdir))


def test_the_same_idempotency_key_returns_the_first_job(project, alice, workdir):
    first = job_create(user=alice, request=request_for(project, workdir), idempotency_key="k-1")
    again = job_create(user=alice, request=request_for(project, workdir), idempotency_key="k-1")
    assert again.pk == first.pk
    assert Job.objects.count() == 1
    assert held(project) == first.requested_gpu_seconds


def test_a_template_gives_defaults_that_the_request_overrides(project, alice, workdir):
    template = JobTemplate.objects.get(name="CPU-only debug job")
    job = job_create(
        user=alice,
        request=JobRequest(
            project=project.slug,
            template=template.pk,
            working_directory=str(workdir),
            time_limit_minutes=7,
        ),
    )
    assert job.template == template
    assert job.partition.name == "debug" and job.gpus_per_node == 0
    assert job.time_limit_minutes == 7
    assert job.script == template.script
    # No GPU, yet not free: one CPU for 7 minutes at 0.01 GPU-hours a CPU-hour.
    assert job.requested_gpu_seconds == math.ceil(7 * 60 * 0.01) == 5


def test_another_users_template_is_not_offered(project, alice, bob, workdir):
    mine = JobTemplate.objects.create(name="bob's", scope="user", owner=bob, script="true\n")
    with pytest.raises(JobInvalid) as refusal:
        job_create(user=alice, request=JobRequest(project=project.slug, template=mine.pk))
    assert "template" in refusal.value.fields


@pytest.mark.django_db(transaction=True)  # the worker that asks Slurm reads the cluster
def test_an_estimate_has_the_cost_and_slurms_start_time_and_saves_nothing(
    make_project, alice, workdir
):
    project = make_project(members={alice: "pi"}, gpu_hours=10)
    estimate = job_estimate(user=alice, request=request_for(project, workdir, gpus_per_node=2))
    assert estimate.requested_gpu_hours == pytest.approx(2 * 5 / 60 + 5 / 60 * 0.01, abs=1e-4)
    assert (estimate.gpu_hours, estimate.cpu_hours) == pytest.approx((2 * 5 / 60, 5 / 60))
    assert estimate.gpu_part_gpu_hours == pytest.approx(2 * 5 / 60)
    assert estimate.cpu_part_gpu_hours == pytest.approx(5 / 60 * 0.01)
    assert estimate.available_gpu_hours == 10
    assert estimate.fits is True
    assert estimate.expected_start is not None
    assert "#SBATCH --gpus-per-node=2" in estimate.rendered_script
    assert not Job.objects.exists()
    assert held(project) == 0
    too_big = job_estimate(
        user=alice, request=request_for(project, workdir, partition="gpu", time_limit_minutes=700)
    )
    assert too_big.fits is False


@pytest.mark.django_db(transaction=True)
def test_once_slurm_missed_an_estimates_deadline_the_next_ones_do_not_wait_for_it(
    make_project, dev_cluster, alice, workdir, settings
):
    from django.core.cache import cache

    project = make_project(members={alice: "pi"}, gpu_hours=10)
    paused = estimates_paused_key(dev_cluster.pk)
    request = request_for(project, workdir)
    settings.ESTIMATE_TIMEOUT_S = 0.001  # no sbatch --test-only answers that fast
    try:
        first = job_estimate(user=alice, request=request)
        assert first.expected_start is None and cache.get(paused)
        settings.ESTIMATE_TIMEOUT_S = 3
        # Slurm would answer in time now, but is not asked while the pause lasts.
        assert job_estimate(user=alice, request=request).expected_start is None
        cache.delete(paused)
        assert job_estimate(user=alice, request=request).expected_start is not None
    finally:
        cache.delete(paused)


def test_an_estimate_does_not_ask_a_cluster_the_last_probe_found_down(
    make_project, dev_cluster, alice, workdir
):
    from clusters.models import ClusterProbe

    project = make_project(members={alice: "pi"}, gpu_hours=10)
    ClusterProbe.objects.filter(cluster=dev_cluster).update(ok=False, error="connect failure")
    # Any Slurm command would fail here: the estimate must not run one.
    with override_settings(SLURM_BIN_DIR="/nonexistent"):
        estimate = job_estimate(user=alice, request=request_for(project, workdir))
    assert estimate.cluster_unreachable == "connect failure"
    assert estimate.expected_start is None
    assert estimate.fits is True and estimate.requested_gpu_hours > 0


@pytest.mark.django_db(transaction=True)
def test_two_creations_at_once_cannot_both_pass_max_submit_jobs(
    project, alice, workdir, monkeypatch, settings
):
    # 5 + 5 tasks over a limit of 8: each alone fits, together they would end submit_failed.
    settings.SLURM_MAX_SUBMIT_JOBS = 8
    request = request_for(project, workdir, array="0-4", time_limit_minutes=1)
    holding, go_on = threading.Event(), threading.Event()
    hold = ledger.ledger_hold

    def slow_hold(**kwargs):
        entry = hold(**kwargs)
        if not holding.is_set():
            holding.set()  # the first has saved its job and holds, not committed
            assert go_on.wait(timeout=30)
        return entry

    monkeypatch.setattr(ledger, "ledger_hold", slow_hold)
    errors: list = []
    with nobody_takes_submissions():
        first = in_thread(lambda: job_create(user=alice, request=request), errors)
        assert holding.wait(timeout=30)
        second = in_thread(lambda: job_create(user=alice, request=request), errors)
        blocked_on_a_lock(
            second,
            'UPDATE "accounts_allocation"%',
            errors,
            what="the second creation to wait for the first's hold",
        )
        go_on.set()
        first.join(timeout=30)
        second.join(timeout=30)
    [refused] = errors
    assert isinstance(refused, JobInvalid)
    [message] = refused.fields["array"]
    assert "You have 5 jobs queued or running" in message and "adds 5" in message
    [job] = Job.objects.filter(owner=alice)
    assert LedgerEntry.objects.filter(kind="hold").count() == 1
    assert held(project) == job.requested_gpu_seconds
