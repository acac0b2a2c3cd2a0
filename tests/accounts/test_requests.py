"""Allocation requests: PIs ask, allocation managers decide, approval grants through the ledger."""

import datetime as dt

import pytest
from django.core.exceptions import ValidationError

from accounts.errors import AllocationOverlap, AlreadyDecided, NotAllowed, Refused
from accounts.groups import ALLOCATION_MANAGERS
from accounts.ledger import allocation_grant
from accounts.models import Allocation, AllocationRequest, LedgerEntry
from accounts.requests import (
    allocation_request_approve,
    allocation_request_create,
    allocation_request_deny,
)
from accounts.selectors import project_balance
from accounts.services import membership_set, project_create, user_create
from clusters.services import cluster_register

TODAY = dt.date.today()


@pytest.fixture
def world(db, alice, bob, charlie):
    """alice is PI of vision, bob a member; charlie is in another project; manny manages."""
    vision = project_create(slug="vision", name="Vision Lab", slurm_account="vision")
    other = project_create(slug="other", name="Other", slurm_account="other")
    membership_set(project=vision, user=alice, role="pi")
    membership_set(project=vision, user=bob, role="member")
    membership_set(project=other, user=charlie, role="pi")
    manny = user_create(
        username="manny", password="pw-manny-1234", is_staff=True, groups=(ALLOCATION_MANAGERS,)
    )
    return vision, cluster_register(name="portal-dev"), manny


def ask(project, cluster, user, hours=100, **changes):
    fields = {
        "project": project,
        "cluster": cluster,
        "requested_by": user,
        "gpu_hours": hours,
        "starts_on": TODAY,
        "ends_on": TODAY + dt.timedelta(days=90),
        "justification": "Training the next model",
    }
    return allocation_request_create(**{**fields, **changes})


def test_approval_creates_the_allocation_and_grants_the_hours_once(world, alice):
    vision, cluster, manny = world
    request = allocation_request_approve(request=ask(vision, cluster, alice), manager=manny)
    assert request.state == AllocationRequest.State.APPROVED
    assert request.decided_by == manny and request.decided_at is not None
    assert request.allocation.state == Allocation.State.ACTIVE
    assert project_balance(vision).available_gpu_seconds == 100 * 3600
    grant = LedgerEntry.objects.get(kind="grant")
    assert (grant.actor, grant.reference) == (manny, f"request:{request.pk}")
    with pytest.raises(AlreadyDecided, match="already approved"):
        allocation_request_approve(request=request, manager=manny)
    assert LedgerEntry.objects.count() == 1


def test_only_a_pi_or_co_pi_may_ask(world, bob, charlie):
    vision, cluster, _ = world
    for user in (bob, charlie):
        with pytest.raises(NotAllowed, match="PI"):
            ask(vision, cluster, user)
    assert not AllocationRequest.objects.exists()


def test_a_researcher_cannot_approve_even_their_own_request(world, alice):
    vision, cluster, _ = world
    request = ask(vision, cluster, alice)
    with pytest.raises(NotAllowed, match="allocation manager"):
        allocation_request_approve(request=request, manager=alice)
    request.refresh_from_db()
    assert request.state == AllocationRequest.State.PENDING
    assert not Allocation.objects.exists()


def test_a_denial_needs_a_comment(world, alice):
    vision, cluster, manny = world
    request = ask(vision, cluster, alice)
    with pytest.raises(Refused, match="why"):
        allocation_request_deny(request=request, manager=manny, comment=" ")
    denied = allocation_request_deny(request=request, manager=manny, comment="Budget is spent")
    assert denied.state == AllocationRequest.State.DENIED
    assert denied.decision_comment == "Budget is spent"
    assert not Allocation.objects.exists()


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"hours": 0}, "gpu_hours"),
        ({"ends_on": TODAY - dt.timedelta(days=1)}, "__all__"),  # "must end after it starts"
        ({"justification": "  "}, "justification"),
    ],
)
def test_bad_requests_are_refused_and_nothing_saved(world, alice, changes, field):
    vision, cluster, _ = world
    with pytest.raises(ValidationError) as refused:
        ask(vision, cluster, alice, **changes)
    assert field in refused.value.message_dict
    assert not AllocationRequest.objects.exists()


def test_an_overlapping_allocation_is_refused(world, alice):
    vision, cluster, manny = world
    allocation_grant(
        project=vision,
        cluster=cluster,
        gpu_hours=10,
        starts_on=TODAY,
        ends_on=TODAY + dt.timedelta(days=30),
        actor=manny,
        reason="first",
    )
    request = ask(vision, cluster, alice, starts_on=TODAY + dt.timedelta(days=10))
    with pytest.raises(AllocationOverlap, match="adjust it instead"):
        allocation_request_approve(request=request, manager=manny)
    request.refresh_from_db()
    assert request.state == AllocationRequest.State.PENDING
    assert Allocation.objects.count() == 1
    # The next period is fine.
    later = ask(vision, cluster, alice, starts_on=TODAY + dt.timedelta(days=30))
    assert allocation_request_approve(request=later, manager=manny).allocation is not None
