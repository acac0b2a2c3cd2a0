"""Twenty submissions by one capped member at once, each on its own connection: the cap
is never overspent (each hold waits for the allocation's row and counts the others'),
and the refused ones leave nothing behind."""

import threading

import pytest

from accounts.caps import member_cap_set, member_use
from accounts.errors import QuotaExceeded
from accounts.models import Allocation, LedgerEntry
from jobs.models import Job
from jobs.services import job_create
from tests.factories import in_thread, request_for
from tests.jobs.test_forged_tokens import nobody_takes_submissions

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("transactional_db")]


def test_twenty_concurrent_submissions_never_exceed_the_members_cap(
    make_project, pat, alice, workdir
):
    project = make_project(members={pat: "pi", alice: "member"}, gpu_hours=100, in_slurm=False)
    allocation = project.allocations.get()
    # 1 GPU for 30 minutes: 0.5 GPU-hours and its CPU's 0.005 = 1818 GPU-seconds a job;
    # a cap of 5 GPU-hours takes 9 of them (16362 s), not a tenth (18180 s).
    member_cap_set(actor=pat, allocation=allocation, user=alice, gpu_hours=5)
    request = request_for(project, workdir, partition="gpu", time_limit_minutes=30)
    start = threading.Barrier(20)
    errors: list = []

    def submit() -> None:
        start.wait(timeout=30)
        job_create(user=alice, request=request)

    with nobody_takes_submissions():
        threads = [in_thread(submit, errors) for _ in range(20)]
        for thread in threads:
            thread.join(timeout=60)
    assert all(isinstance(error, QuotaExceeded) for error in errors), errors
    assert {error.limited_by for error in errors} == {"member_cap"}
    jobs = Job.objects.filter(owner=alice)
    assert jobs.count() == 9 and len(errors) == 11
    used = member_use(allocation.pk, alice.pk)
    assert used == sum(job.requested_gpu_seconds for job in jobs) <= 5 * 3600
    assert LedgerEntry.objects.filter(kind="hold").count() == 9
    assert Allocation.objects.get(pk=allocation.pk).held_gpu_seconds == used
