"""slurmctld stops in the middle of a burst of submissions and comes back: every job
reaches Slurm exactly once (tests/jobs/test_submit_faults.py covers a controller that
is down before the jobs are created)."""

import pytest

from jobs.invariants import Findings, invariants_check
from jobs.models import Job
from jobs.states import JobState
from tests.conftest import running_worker
from tests.factories import wait_for
from tests.faults.support import Burst, assert_in_slurm_once_each, settle, stack, submitted

pytestmark = [pytest.mark.fault, pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


def test_a_burst_cut_by_slurmctld_stopping_reaches_slurm_once_each(
    make_project, dev_cluster, alice, workdir
):
    project = make_project(members={alice: "pi"})
    with (
        running_worker(
            beat=True, PORTAL_SLURM_COMMAND_TIMEOUT_S="5", PORTAL_JOB_SUBMIT_CLAIM_S="20"
        ),
        Burst(user=alice, project=project, workdir=workdir, count=16, every_s=0.3) as burst,
    ):
        wait_for(lambda: submitted(burst.ids) >= 3, timeout_s=30, what="the burst to flow")
        stack("stop", "slurmctld")
        try:
            wait_for(
                lambda: Job.objects.filter(
                    pk__in=burst.ids, reason__startswith="Slurm is not"
                ).exists(),
                timeout_s=30,
                what="a submission to find slurmctld gone",
            )
            cut_at = submitted(burst.ids)
        finally:
            stack("start", "slurmctld")
        ids = burst.join()
        assert cut_at < len(ids), "the controller stopped while jobs were still coming"
        settle(ids, timeout_s=120)

    assert not Job.objects.filter(pk__in=ids, state=JobState.SUBMIT_FAILED).exists()
    assert Job.objects.filter(pk__in=ids, state=JobState.COMPLETED).count() == len(ids)
    assert_in_slurm_once_each(dev_cluster, project, ids)
    assert invariants_check(cluster=dev_cluster) == Findings()
