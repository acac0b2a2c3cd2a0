"""The GPU-hour bank: every movement is one entry, exactly once, and never overspends."""

import datetime as dt
import threading

import pytest
from django.core.exceptions import ValidationError
from django.db import DatabaseError, connection, transaction

from accounts.errors import NoActiveAllocation, QuotaExceeded, Refused
from accounts.ledger import (
    allocation_adjust,
    allocation_expire,
    allocation_grant,
    ledger_charge,
    ledger_hold,
    ledger_release,
)
from accounts.models import Allocation, LedgerEntry
from accounts.selectors import (
    active_allocation,
    allocation_balance,
    ledger_drift,
    project_balance,
)
from accounts.services import project_create
from clusters.services import cluster_register

HOUR = 3600
TODAY = dt.date.today()


@pytest.fixture
def vision(db):
    return project_create(slug="vision", name="Vision Lab", slurm_account="vision")


@pytest.fixture
def cluster(db):
    return cluster_register(name="portal-dev")


def grant(project, cluster, gpu_hours=10, **changes):
    fields = {
        "project": project,
        "cluster": cluster,
        "gpu_hours": gpu_hours,
        "starts_on": TODAY - dt.timedelta(days=1),
        "ends_on": TODAY + dt.timedelta(days=30),
        "actor": None,
        "reason": "test grant",
    }
    return allocation_grant(**{**fields, **changes})


def test_a_grant_makes_an_active_allocation_with_its_hours(vision, cluster):
    allocation = grant(vision, cluster, 10)
    assert allocation.state == Allocation.State.ACTIVE
    assert allocation_balance(allocation).as_gpu_hours() == {
        "granted_gpu_hours": 10,
        "used_gpu_hours": 0,
        "held_gpu_hours": 0,
        "available_gpu_hours": 10,
    }
    assert allocation.entries.get().kind == LedgerEntry.Kind.GRANT
    assert active_allocation(project=vision, cluster=cluster) == allocation


@pytest.mark.parametrize("hours", [0, -5])
def test_a_grant_of_no_hours_is_refused_and_nothing_saved(vision, cluster, hours):
    with pytest.raises(Refused, match="positive"):
        grant(vision, cluster, hours)
    assert not Allocation.objects.exists()


def test_a_period_that_ends_before_it_starts_is_refused(vision, cluster):
    with pytest.raises(ValidationError):
        grant(vision, cluster, starts_on=TODAY, ends_on=TODAY - dt.timedelta(days=1))
    assert not Allocation.objects.exists() and not LedgerEntry.objects.exists()


def test_a_project_without_an_active_allocation_has_none(vision, cluster):
    grant(vision, cluster, starts_on=TODAY + dt.timedelta(days=5))
    with pytest.raises(NoActiveAllocation):
        active_allocation(project=vision, cluster=cluster)


def test_a_hold_reduces_what_is_available_once(vision, cluster):
    allocation = grant(vision, cluster, 10)
    first = ledger_hold(allocation=allocation, reference="job-1", gpu_seconds=4 * HOUR)
    again = ledger_hold(allocation=allocation, reference="job-1", gpu_seconds=4 * HOUR)
    allocation.refresh_from_db()
    assert first == again
    assert allocation.held_gpu_seconds == 4 * HOUR
    assert allocation.available_gpu_seconds == 6 * HOUR


def test_a_hold_over_the_balance_is_refused_with_both_numbers(vision, cluster):
    allocation = grant(vision, cluster, 10)
    ledger_hold(allocation=allocation, reference="job-1", gpu_seconds=8 * HOUR)
    with pytest.raises(QuotaExceeded) as refused:
        ledger_hold(allocation=allocation, reference="job-2", gpu_seconds=3 * HOUR)
    assert refused.value.requested_gpu_hours == 3
    assert refused.value.available_gpu_hours == 2
    assert "3.00 GPU-hours" in str(refused.value) and "2.00 are available" in str(refused.value)
    assert not LedgerEntry.objects.filter(reference="job-2").exists()


def test_a_release_gives_the_hold_back_once(vision, cluster):
    allocation = grant(vision, cluster, 10)
    ledger_hold(allocation=allocation, reference="job-1", gpu_seconds=4 * HOUR)
    ledger_release(reference="job-1")
    ledger_release(reference="job-1")
    allocation.refresh_from_db()
    assert allocation.held_gpu_seconds == 0
    assert allocation.available_gpu_seconds == 10 * HOUR
    assert LedgerEntry.objects.filter(kind="release").count() == 1
    assert ledger_release(reference="never-held") is None


def test_a_charge_happens_once_and_releases_the_hold(vision, cluster):
    allocation = grant(vision, cluster, 10)
    ledger_hold(allocation=allocation, reference="job-1", gpu_seconds=4 * HOUR)
    for _ in range(2):
        ledger_charge(
            allocation=allocation,
            reference="portal-dev:42",
            gpu_seconds=1 * HOUR,
            release_references=["job-1"],
        )
    allocation.refresh_from_db()
    assert (allocation.used_gpu_seconds, allocation.held_gpu_seconds) == (HOUR, 0)
    assert allocation.available_gpu_seconds == 9 * HOUR
    assert LedgerEntry.objects.filter(kind="charge").count() == 1


def test_a_job_outside_the_portal_is_charged_without_a_hold(vision, cluster):
    allocation = grant(vision, cluster, 10)
    ledger_charge(allocation=allocation, reference="portal-dev:77", gpu_seconds=2 * HOUR)
    assert project_balance(vision).used_gpu_seconds == 2 * HOUR


def test_an_adjustment_needs_a_reason_and_cannot_take_more_than_granted(vision, cluster, alice):
    allocation = grant(vision, cluster, 10)
    with pytest.raises(Refused, match="reason"):
        allocation_adjust(allocation=allocation, gpu_seconds=HOUR, actor=alice, reason=" ")
    with pytest.raises(Refused, match="more than was granted"):
        allocation_adjust(allocation=allocation, gpu_seconds=-11 * HOUR, actor=alice, reason="x")
    entry = allocation_adjust(
        allocation=allocation, gpu_seconds=-2 * HOUR, actor=alice, reason="overestimated"
    )
    allocation.refresh_from_db()
    assert allocation.granted_gpu_seconds == 8 * HOUR
    assert (entry.actor, entry.reason) == (alice, "overestimated")


def test_at_the_end_of_the_period_the_unused_hours_lapse(vision, cluster):
    allocation = grant(vision, cluster, 10)
    ledger_charge(allocation=allocation, reference="portal-dev:1", gpu_seconds=3 * HOUR)
    entry = allocation_expire(allocation=allocation)
    assert allocation_expire(allocation=allocation) is None
    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.EXPIRED
    assert entry.gpu_seconds == -7 * HOUR
    assert allocation.available_gpu_seconds == 0


def test_the_ledger_is_append_only(vision, cluster):
    entry = grant(vision, cluster).entries.get()
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        LedgerEntry.objects.filter(pk=entry.pk).update(gpu_seconds=1)
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        LedgerEntry.objects.filter(pk=entry.pk).delete()


def test_cached_totals_equal_the_sums_and_tampering_shows(vision, cluster):
    allocation = grant(vision, cluster, 10)
    ledger_hold(allocation=allocation, reference="job-1", gpu_seconds=HOUR)
    ledger_charge(allocation=allocation, reference="portal-dev:9", gpu_seconds=HOUR)
    assert ledger_drift() == []
    Allocation.objects.filter(pk=allocation.pk).update(used_gpu_seconds=0)
    assert ledger_drift() == [(allocation.pk, "used_gpu_seconds", 0, HOUR)]


def test_fifty_concurrent_holds_accept_only_what_fits(transactional_db):
    project = project_create(slug="race", name="Race", slurm_account="race")
    allocation = grant(project, cluster_register(name="portal-dev"), 10)
    accepted, refused, errors = [], [], []
    start = threading.Barrier(50)

    def hold(n: int) -> None:
        try:
            start.wait()
            ledger_hold(allocation=allocation, reference=f"job-{n}", gpu_seconds=HOUR // 2)
            accepted.append(n)
        except QuotaExceeded:
            refused.append(n)
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=hold, args=(n,)) for n in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    allocation.refresh_from_db()
    assert errors == []
    assert len(accepted) == 20 and len(refused) == 30  # 10 GPU-hours in half-hour holds
    assert allocation.available_gpu_seconds == 0
    assert ledger_drift() == []


def test_usage_by_user_partition_and_month(vision, cluster, alice, bob):
    from accounts.selectors import project_usage
    from clusters.models import Partition

    gpu = Partition.objects.create(cluster=cluster, name="gpu")
    debug = Partition.objects.create(cluster=cluster, name="debug")
    allocation = grant(vision, cluster, 100)
    for n, (user, partition, hours) in enumerate(
        [(alice, gpu, 3), (alice, debug, 1), (bob, gpu, 2), (None, gpu, 5)]
    ):
        ledger_charge(
            allocation=allocation,
            reference=f"portal-dev:{n}",
            gpu_seconds=hours * HOUR,
            user=user,
            partition=partition,
        )
    assert dict(project_usage(vision, group_by="user")) == {"alice": 4, "bob": 2, None: 5}
    assert dict(project_usage(vision, group_by="partition")) == {"gpu": 10, "debug": 1}
    [(month, hours)] = project_usage(vision, group_by="month")
    assert (month.year, month.month, hours) == (TODAY.year, TODAY.month, 11)
    with pytest.raises(ValueError, match="group_by"):
        project_usage(vision, group_by="colour")


def test_the_beat_task_expires_allocations_whose_period_ended(vision, cluster):
    from accounts.tasks import allocations_expire_task

    ended = grant(vision, cluster, 10, starts_on=TODAY - dt.timedelta(days=60),
                  ends_on=TODAY - dt.timedelta(days=30))  # fmt: skip
    current = grant(vision, cluster, 10)
    allocations_expire_task()
    ended.refresh_from_db()
    current.refresh_from_db()
    assert ended.state == Allocation.State.EXPIRED and ended.available_gpu_seconds == 0
    assert current.state == Allocation.State.ACTIVE
