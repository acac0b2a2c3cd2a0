"""Two allocation managers deciding the same request at once: one decides, the other is
told it was decided (409, as a later repeat is), and the hours are granted once."""

import datetime as dt
import threading

import pytest
from django.contrib.auth.models import Group

from accounts import requests
from accounts.groups import ALLOCATION_MANAGERS
from accounts.models import Allocation, AllocationRequest, LedgerEntry
from accounts.requests import allocation_request_create
from accounts.services import membership_set, project_create, user_create
from clusters.services import cluster_register
from tests.api.conftest import error_of, token_client
from tests.factories import blocked_on_a_lock, in_thread

pytestmark = pytest.mark.usefixtures("transactional_db")

TODAY = dt.date.today()


@pytest.fixture
def managers():
    # A transactional test starts from an emptied database: the group its migration
    # made is gone.
    Group.objects.get_or_create(name=ALLOCATION_MANAGERS)
    return [
        user_create(username=name, password=f"{name}-pass-1234", groups=(ALLOCATION_MANAGERS,))
        for name in ("olga", "manny")
    ]


@pytest.fixture
def pending(pat):
    project = project_create(slug="vision", name="Vision", slurm_account="vision")
    membership_set(project=project, user=pat, role="pi")
    return allocation_request_create(
        project=project,
        cluster=cluster_register(name="portal-dev"),
        requested_by=pat,
        gpu_hours=200,
        starts_on=TODAY,
        ends_on=TODAY + dt.timedelta(days=90),
        justification="More",
    )


def decide(client, request, verdict: str):
    return client.post(
        f"/api/v1/allocation-requests/{request.pk}/{verdict}/",
        {"comment": "Decided"},
        content_type="application/json",
    )


@pytest.mark.parametrize("second", ["approve", "deny"])
def test_the_manager_who_decides_second_is_told_it_was_decided(
    managers, pending, monkeypatch, second
):
    first_client, second_client = (token_client(manager) for manager in managers)
    granting, granted = threading.Event(), threading.Event()
    grant = requests.allocation_grant

    def slow_grant(**kwargs):
        allocation = grant(**kwargs)
        granting.set()
        assert granted.wait(timeout=30)
        return allocation

    monkeypatch.setattr(requests, "allocation_grant", slow_grant)
    errors: list = []
    answers: dict[str, object] = {}
    first = in_thread(
        lambda: answers.update(first=decide(first_client, pending, "approve")), errors
    )
    assert granting.wait(timeout=30)
    # The first approval holds the request's lock, not committed: the second finds the
    # request pending, passes the API's check and waits for the lock.
    other = in_thread(lambda: answers.update(second=decide(second_client, pending, second)), errors)
    blocked_on_a_lock(
        other,
        'SELECT "accounts_allocationrequest".%',
        errors,
        what="the second decision to wait for the request's lock",
    )
    granted.set()
    first.join(timeout=30)
    other.join(timeout=30)
    assert errors == []
    assert answers["first"].status_code == 200
    assert answers["second"].status_code == 409
    assert error_of(answers["second"])["code"] == "already_decided"
    assert "already approved" in error_of(answers["second"])["message"]
    pending.refresh_from_db()
    assert pending.state == AllocationRequest.State.APPROVED
    assert pending.decided_by == managers[0]
    assert Allocation.objects.filter(project=pending.project).count() == 1
    assert LedgerEntry.objects.filter(kind="grant").count() == 1
