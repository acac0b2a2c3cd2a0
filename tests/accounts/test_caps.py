"""Per-member caps: who sets them (audited), what counts as a member's use, and the hold
that refuses a member over their cap while a teammate's goes through."""

import pytest

from accounts.caps import cap_for, member_cap_clear, member_cap_set, member_use, member_uses
from accounts.errors import NotAllowed, QuotaExceeded, Refused
from accounts.ledger import ledger_charge, ledger_hold, ledger_release
from accounts.models import Allocation, LedgerEntry, MemberCap
from accounts.services import membership_set, user_create
from audit.models import AuditEvent
from tests.factories import project_with_allocation, recorded_cluster

HOUR = 3600


@pytest.fixture
def people(db):
    return {
        name: user_create(username=name, password=f"{name}-pass-1234", posix_username=name)
        for name in ("pat", "alice", "bob", "charlie")
    }


@pytest.fixture
def allocation(people):
    project = project_with_allocation(recorded_cluster(), pi=people["pat"], gpu_hours=10)
    membership_set(project=project, user=people["alice"], role="member")
    membership_set(project=project, user=people["bob"], role="member")
    return project.allocations.get()


def hold(allocation, user, hours: float, reference: str):
    return ledger_hold(
        allocation=allocation, reference=reference, gpu_seconds=int(hours * HOUR), user=user
    )


def test_the_pi_caps_a_member_and_every_change_is_audited(allocation, people):
    pat, alice = people["pat"], people["alice"]
    cap = member_cap_set(actor=pat, allocation=allocation, user=alice, gpu_hours=2)
    assert cap.gpu_seconds == 2 * HOUR and cap.set_by == pat
    member_cap_set(actor=pat, allocation=allocation, user=alice, gpu_hours=2)  # a repeat
    member_cap_set(actor=pat, allocation=allocation, user=alice, gpu_hours=3)
    assert member_cap_clear(actor=pat, allocation=allocation, user=alice) is True
    assert member_cap_clear(actor=pat, allocation=allocation, user=alice) is False
    events = AuditEvent.objects.filter(action__startswith="member_cap").order_by("at", "pk")
    assert [(e.action, e.detail.get("gpu_hours"), e.detail["was_gpu_hours"]) for e in events] == [
        ("member_cap.set", 2.0, None),
        ("member_cap.set", 3.0, 2.0),
        ("member_cap.clear", None, 3.0),
    ]
    assert {e.on_behalf_of_id for e in events} == {alice.pk}
    assert not MemberCap.objects.exists()


def test_a_member_cannot_cap_anyone_not_even_themselves(allocation, people):
    for who in (people["alice"], people["charlie"]):
        with pytest.raises(NotAllowed):
            member_cap_set(actor=who, allocation=allocation, user=people["alice"], gpu_hours=99)
        with pytest.raises(NotAllowed):
            member_cap_set(actor=who, allocation=allocation, user=None, gpu_hours=99)
    assert not MemberCap.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="member_cap").exists()


def test_only_members_are_capped_and_a_cap_is_not_negative(allocation, people):
    with pytest.raises(Refused):
        member_cap_set(
            actor=people["pat"], allocation=allocation, user=people["charlie"], gpu_hours=1
        )
    with pytest.raises(Refused):
        member_cap_set(actor=people["pat"], allocation=allocation, user=people["bob"], gpu_hours=-1)
    assert not MemberCap.objects.exists()


def test_a_members_own_cap_wins_over_the_default(allocation, people):
    pat, alice, bob = people["pat"], people["alice"], people["bob"]
    member_cap_set(actor=pat, allocation=allocation, user=None, gpu_hours=1)
    member_cap_set(actor=pat, allocation=allocation, user=alice, gpu_hours=4)
    assert cap_for(allocation.pk, alice.pk).gpu_seconds == 4 * HOUR
    assert cap_for(allocation.pk, bob.pk).gpu_seconds == 1 * HOUR
    assert cap_for(allocation.pk, pat.pk).user is None


def test_use_is_what_was_charged_plus_what_is_held_now(allocation, people):
    alice, bob = people["alice"], people["bob"]
    hold(allocation, alice, 1, "a1")
    hold(allocation, alice, 2, "a2")
    hold(allocation, bob, 3, "b1")
    # a1 ended having used half an hour: charged, and its hold released with it.
    ledger_charge(
        allocation=allocation,
        reference="c:1",
        gpu_seconds=HOUR // 2,
        release_references=["a1"],
        user=alice,
    )
    ledger_release(reference="b1")  # never started
    assert member_use(allocation.pk, alice.pk) == HOUR // 2 + 2 * HOUR
    assert member_uses(allocation.pk) == {alice.pk: HOUR // 2 + 2 * HOUR}  # bob: nothing


def test_a_hold_over_the_cap_is_refused_with_both_numbers_and_a_teammates_is_not(
    allocation, people
):
    pat, alice, bob = people["pat"], people["alice"], people["bob"]
    member_cap_set(actor=pat, allocation=allocation, user=None, gpu_hours=3)
    hold(allocation, alice, 2, "a1")
    with pytest.raises(QuotaExceeded) as refusal:
        hold(allocation, alice, 2, "a2")
    assert refusal.value.limited_by == "member_cap"
    assert refusal.value.member_remaining_gpu_hours == 1
    assert refusal.value.available_gpu_hours == 8  # the project's, as it was
    assert "leaves you only 1.00" in str(refusal.value)
    hold(allocation, bob, 2, "b1")
    allocation = Allocation.objects.get(pk=allocation.pk)
    assert allocation.held_gpu_seconds == 4 * HOUR  # the refused hold left nothing behind
    assert not LedgerEntry.objects.filter(reference="a2").exists()


def test_over_the_projects_balance_it_is_the_project_that_refuses(allocation, people):
    pat, alice = people["pat"], people["alice"]
    member_cap_set(actor=pat, allocation=allocation, user=alice, gpu_hours=50)
    with pytest.raises(QuotaExceeded) as refusal:
        hold(allocation, alice, 11, "a1")
    assert refusal.value.limited_by == "project"
    assert refusal.value.available_gpu_hours == 10
    assert refusal.value.member_remaining_gpu_hours == 50


def test_a_cap_of_zero_stops_the_members_work(allocation, people):
    member_cap_set(actor=people["pat"], allocation=allocation, user=people["alice"], gpu_hours=0)
    with pytest.raises(QuotaExceeded):
        hold(allocation, people["alice"], 0.01, "a1")
    hold(allocation, people["bob"], 0.01, "b1")
