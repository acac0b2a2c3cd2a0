"""Two beats at once — two workers each running beat, and the periodic tasks called
twice more at the same moment from threads — with every submission enqueued twice:
no job twice in Slurm, no double charge, no event twice, no notice mailed twice."""

import threading

import pytest
from django.core import mail
from django.db import connection
from django.db.models import Count

from accounts.ledger import allocation_adjust
from accounts.models import Allocation, LedgerEntry, Notification
from accounts.notifications import notifications_send
from jobs.invariants import Findings, invariants_check
from jobs.models import Job, JobEvent
from jobs.services import job_create
from jobs.states import JobState
from jobs.tasks import (
    accounting_ingest_task,
    job_submit_task,
    queue_sync_task,
    submissions_sweep_task,
)
from tests.conftest import running_worker
from tests.factories import wait_for
from tests.faults.support import assert_in_slurm_once_each, quick_job, settle, unsettled

# Its two workers with beat are its own: it runs beside the other tests.
pytestmark = [
    pytest.mark.fault(own_processes=True),
    pytest.mark.slurm,
    pytest.mark.django_db(transaction=True),
]


def twice_at_once(function, *args) -> None:
    barrier = threading.Barrier(2)

    def run() -> None:
        try:
            barrier.wait()
            function(*args)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)


def test_two_beats_at_once_have_no_double_effect(make_project, dev_cluster, alice, workdir):
    alice.email = "alice@example.org"
    alice.save(update_fields=["email"])
    project = make_project(members={alice: "pi"}, gpu_hours=1)
    allocation = Allocation.objects.get(project=project)
    with (
        running_worker(beat=True) as (other_queue, _, _),
        running_worker(beat=True),  # the test enqueues on this one's queue
    ):
        ids = [
            job_create(user=alice, request=quick_job(project, workdir, i, script="sleep 2\n")).pk
            for i in range(6)
        ]
        for job_id in ids:
            job_submit_task.apply_async((job_id,), queue=other_queue)
        # The hours are held; now leave 10 GPU-seconds, so the jobs' use crosses 80 % and 100 %.
        allocation_adjust(
            allocation=allocation, gpu_seconds=-3590, actor=alice, reason="fault test"
        )

        def periodic_twice() -> bool:
            twice_at_once(submissions_sweep_task)
            twice_at_once(queue_sync_task, dev_cluster.pk)
            twice_at_once(accounting_ingest_task, dev_cluster.pk)
            return not unsettled(ids).exists()

        wait_for(periodic_twice, timeout_s=90, interval_s=0.5, what="the jobs to settle")
        settle(ids)
        for _ in range(2):
            twice_at_once(notifications_send)

    assert Job.objects.filter(pk__in=ids, state=JobState.COMPLETED).count() == 6
    assert_in_slurm_once_each(dev_cluster, project, ids)
    assert LedgerEntry.objects.filter(allocation=allocation, kind="charge").count() == 6
    assert LedgerEntry.objects.filter(allocation=allocation, kind="release").count() == 6
    assert not (
        JobEvent.objects.filter(job_id__in=ids)
        .values("job_id", "state")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .exists()
    ), "no state is recorded twice for a job: " + "; ".join(
        f"{job} {state} {detail!r} {at:%H:%M:%S.%f}"
        for job, state, detail, at in JobEvent.objects.filter(job_id__in=ids)
        .order_by("job_id", "id")
        .values_list("job_id", "state", "detail", "at")
    )
    notices = Notification.objects.filter(allocation=allocation)
    assert sorted(notices.values_list("kind", flat=True)) == sorted(
        [Notification.Kind.USAGE_80, Notification.Kind.USAGE_100]
    )
    # Each notice is told once: 80 % and 100 % in one mail, or, when the beats' own
    # notification run fell between two charges, 80 % in one mail and 100 % in the next.
    assert {tuple(message.to) for message in mail.outbox} == {("alice@example.org",)}
    bodies = [message.body for message in mail.outbox]
    told_100 = [body for body in bodies if "All of its GPU-hours are used" in body]
    assert len(told_100) == 1, bodies
    assert len(bodies) == 1 or (len(bodies) == 2 and "% of its GPU-hours are used." in bodies[0])
    assert invariants_check(cluster=dev_cluster) == Findings()
