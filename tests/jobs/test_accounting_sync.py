"""accounting_sync on the live cluster, through each backend: every way a job can end is
read back, one that never became eligible included."""

import pytest

from accounts.models import LedgerEntry
from accounts.selectors import project_balance
from jobs.accounting import accounting_sync
from jobs.control import job_control
from jobs.queue_sync import queue_sync
from jobs.services import job_create
from jobs.states import JobState
from jobs.submission import job_submit
from tests.conftest import through_slurmrestd
from tests.factories import request_for, wait_for

pytestmark = pytest.mark.slurm


@pytest.fixture(params=["cli", "rest"])
def project(request, make_project, dev_cluster, alice):
    project = make_project(members={alice: "pi"}, gpu_hours=10)
    if request.param == "rest":
        through_slurmrestd(dev_cluster)
    return project


def test_a_job_cancelled_while_it_waits_on_a_dependency_ends_cancelled_and_frees_its_hold(
    project, alice, workdir
):
    first = job_create(user=alice, request=request_for(project, workdir, script="sleep 300\n"))
    job_submit(job_id=first.pk)
    waiting = job_create(user=alice, request=request_for(project, workdir, depends_on=(first.pk,)))
    job_submit(job_id=waiting.pk)
    queue_sync(cluster=waiting.cluster)
    waiting.refresh_from_db()
    assert (waiting.state, waiting.reason) == (JobState.PENDING, "Dependency")

    job_control(job_id=waiting.pk, action="cancel")  # what the cancel task does

    def ended_in_accounting():
        # The queue shows the job cancelled for a while (MinJobAge); only accounting
        # finishes it: what it used (nothing) is charged and its hold released.
        queue_sync(cluster=waiting.cluster)
        accounting_sync(cluster=waiting.cluster)
        waiting.refresh_from_db()
        return waiting.used_gpu_seconds is not None

    wait_for(ended_in_accounting, timeout_s=60, interval_s=1, what="accounting to end the job")
    assert waiting.state == JobState.CANCELLED
    assert waiting.used_gpu_seconds == 0
    assert LedgerEntry.objects.filter(kind="release", reference=waiting.hold_reference).exists()
    first.refresh_from_db()
    assert first.state in (JobState.PENDING, JobState.RUNNING)
    assert project_balance(project).held_gpu_seconds == first.requested_gpu_seconds
    job_control(job_id=first.pk, action="cancel")
