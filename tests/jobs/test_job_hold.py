"""job_hold and job_release decide on the job's locked row, not on the caller's copy."""

import threading

import pytest
from django.db import transaction

from jobs.errors import JobInvalid
from jobs.models import Job
from jobs.services import job_hold, job_release
from jobs.states import JobState
from tests.factories import blocked_on_a_lock, in_thread, project_with_allocation, recorded_cluster
from tests.jobs.test_accounting_ingest import portal_job


@pytest.fixture
def cluster(db):
    return recorded_cluster()


@pytest.fixture
def project(cluster, alice):
    return project_with_allocation(cluster, pi=alice)


@pytest.fixture
def pending(project, cluster, alice):
    job = portal_job(project, cluster, alice, slurm_job_id=900)
    Job.objects.filter(pk=job.pk).update(state=JobState.PENDING)
    job.refresh_from_db()
    return job


def test_a_pending_job_is_held_by_a_task_after_commit(
    pending, alice, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        job_hold(user=alice, job=pending)
    assert len(callbacks) == 1
    assert pending.events.last().detail == "hold asked by alice"


def test_a_hold_on_a_copy_read_before_the_job_ended_is_refused(
    pending, alice, django_capture_on_commit_callbacks
):
    Job.objects.filter(pk=pending.pk).update(state=JobState.COMPLETED)
    assert pending.state == JobState.PENDING  # the page's copy
    with django_capture_on_commit_callbacks() as callbacks, pytest.raises(JobInvalid):
        job_hold(user=alice, job=pending)
    assert callbacks == []
    assert not pending.events.filter(detail__contains="hold asked").exists()


def test_a_release_on_a_copy_read_before_the_job_ended_is_refused(
    pending, alice, django_capture_on_commit_callbacks
):
    Job.objects.filter(pk=pending.pk).update(state=JobState.CANCELLED)
    with django_capture_on_commit_callbacks() as callbacks, pytest.raises(JobInvalid):
        job_release(user=alice, job=pending)
    assert callbacks == []
    assert not pending.events.filter(detail__contains="release asked").exists()


@pytest.mark.parametrize("action", [job_hold, job_release])
def test_an_action_waits_for_a_job_being_finished_and_then_refuses(
    transactional_db, pending, alice, action
):
    finishing, finished = threading.Event(), threading.Event()

    def accounting_finishes_the_job() -> None:
        with transaction.atomic():
            Job.objects.select_for_update().get(pk=pending.pk)
            Job.objects.filter(pk=pending.pk).update(state=JobState.COMPLETED)
            finishing.set()
            assert finished.wait(timeout=30)

    errors: list = []
    accounting = in_thread(accounting_finishes_the_job, errors)
    assert finishing.wait(timeout=30)
    user_action = in_thread(lambda: action(user=alice, job=pending), errors)
    blocked_on_a_lock(
        user_action, 'SELECT "jobs_job".%', errors, what="the action to wait for the job's row"
    )
    finished.set()
    accounting.join(timeout=30)
    user_action.join(timeout=30)
    assert [type(error) for error in errors] == [JobInvalid]
    assert not pending.events.filter(detail__contains="asked").exists()
