"""Mail to PIs and co-PIs at 80% and 100% of an allocation and 14 days before it ends:
one mail per person per run, each notice once per allocation."""

import datetime as dt
import logging
import smtplib

import pytest
from django.core.mail.backends.locmem import EmailBackend
from django.utils import timezone

from accounts.ledger import allocation_grant, ledger_charge, ledger_hold
from accounts.models import Allocation, Notification
from accounts.notifications import CLAIM_TIMEOUT, notifications_send
from accounts.services import membership_set, project_create
from accounts.tasks import notifications_send_task
from clusters.services import cluster_register

HOUR = 3600
TODAY = timezone.localdate()


@pytest.fixture
def cluster(db):
    return cluster_register(name="portal-dev")


@pytest.fixture
def people(alice, bob, charlie):
    """Alice is the PI, Bob a co-PI and Charlie a member; all have an address."""
    for user in (alice, bob, charlie):
        user.email = f"{user.username}@example.org"
        user.save(update_fields=["email"])
    return alice, bob, charlie


def project_with(slug, name, *, pi, co_pi=None, member=None):
    project = project_create(slug=slug, name=name, slurm_account=slug)
    membership_set(project=project, user=pi, role="pi")
    if co_pi:
        membership_set(project=project, user=co_pi, role="co_pi")
    if member:
        membership_set(project=project, user=member, role="member")
    return project


@pytest.fixture
def vision(people):
    alice, bob, charlie = people
    return project_with("vision", "Vision Lab", pi=alice, co_pi=bob, member=charlie)


def grant(project, cluster, gpu_hours=10, ends_in_days=60):
    return allocation_grant(
        project=project,
        cluster=cluster,
        gpu_hours=gpu_hours,
        starts_on=TODAY - dt.timedelta(days=10),
        ends_on=TODAY + dt.timedelta(days=ends_in_days),
        actor=None,
        reason="test grant",
    )


def use(allocation, hours, reference):
    ledger_charge(allocation=allocation, reference=reference, gpu_seconds=int(hours * HOUR))


def recipients(mailoutbox):
    return sorted(address for mail in mailoutbox for address in mail.to)


def test_crossing_80_percent_mails_each_pi_and_co_pi_once(vision, cluster, mailoutbox):
    allocation = grant(vision, cluster, 10)
    use(allocation, 7.9, "portal-dev:1")
    assert notifications_send() == 0
    use(allocation, 0.1, "portal-dev:2")  # 8 of 10: 80%

    assert notifications_send() == 2
    assert recipients(mailoutbox) == ["alice@example.org", "bob@example.org"]
    mail = mailoutbox[0]
    assert mail.subject == "[Slurm GPU Portal] GPU-hours of Vision Lab"
    assert "Vision Lab (vision) on portal-dev" in mail.body
    assert "8.0 of 10.0 GPU-hours used, 0.0 held by queued and running jobs" in mail.body
    assert "- 80% of its GPU-hours are used." in mail.body
    assert mail.from_email == "portal@localhost"
    notice = Notification.objects.get()
    assert (notice.allocation, notice.kind) == (allocation, Notification.Kind.USAGE_80)
    assert notice.sent_at is not None
    assert notice.recipients == "alice@example.org, bob@example.org"


def test_a_second_run_sends_nothing(vision, cluster, mailoutbox):
    allocation = grant(vision, cluster, 10)
    use(allocation, 9, "portal-dev:1")
    assert notifications_send() == 2
    use(allocation, 0.5, "portal-dev:2")  # more jobs, still under 100%
    assert notifications_send() == 0
    assert len(mailoutbox) == 2


def test_crossing_100_percent_later_mails_again(vision, cluster, mailoutbox):
    allocation = grant(vision, cluster, 10)
    use(allocation, 8, "portal-dev:1")
    notifications_send()
    mailoutbox.clear()
    use(allocation, 2, "portal-dev:2")

    assert notifications_send() == 2
    assert recipients(mailoutbox) == ["alice@example.org", "bob@example.org"]
    assert "- All of its GPU-hours are used (100%)" in mailoutbox[0].body
    assert notifications_send() == 0


def test_jumping_past_100_percent_announces_only_the_highest(vision, cluster, mailoutbox):
    allocation = grant(vision, cluster, 10)
    use(allocation, 10, "portal-dev:1")
    assert notifications_send() == 2
    assert "All of its" in mailoutbox[0].body
    assert "80%" not in mailoutbox[0].body
    kinds = set(Notification.objects.filter(sent_at__isnull=False).values_list("kind", flat=True))
    assert kinds == {"usage_80", "usage_100"}  # the 80% notice is settled, never sent late
    assert notifications_send() == 0


def test_held_hours_do_not_count_as_used(vision, cluster, mailoutbox):
    allocation = grant(vision, cluster, 10)
    use(allocation, 5, "portal-dev:1")
    ledger_hold(allocation=allocation, reference="token-1", gpu_seconds=5 * HOUR)
    assert notifications_send() == 0
    assert mailoutbox == []


def test_a_pi_of_two_projects_gets_one_mail_about_both(people, vision, cluster, mailoutbox):
    alice, _, charlie = people
    robotics = project_with("robotics", "Robotics", pi=alice, member=charlie)
    use(grant(vision, cluster, 10), 9, "portal-dev:1")
    use(grant(robotics, cluster, 20), 20, "portal-dev:2")

    assert notifications_send() == 2  # alice and bob, not one mail per project
    by_address = {mail.to[0]: mail for mail in mailoutbox}
    assert set(by_address) == {"alice@example.org", "bob@example.org"}
    to_alice = by_address["alice@example.org"]
    assert to_alice.subject == "[Slurm GPU Portal] GPU-hours of Robotics, Vision Lab"
    assert "Vision Lab (vision) on portal-dev" in to_alice.body
    assert "- 90% of its GPU-hours are used." in to_alice.body
    assert "Robotics (robotics) on portal-dev" in to_alice.body
    assert "- All of its GPU-hours are used (100%)" in to_alice.body
    assert "Robotics" not in by_address["bob@example.org"].body


def test_an_allocation_ending_in_14_days_is_announced_once(vision, cluster, mailoutbox):
    allocation = grant(vision, cluster, 10, ends_in_days=15)
    assert notifications_send() == 0
    tomorrow = timezone.now() + dt.timedelta(days=1)

    assert notifications_send(now=tomorrow) == 2
    assert recipients(mailoutbox) == ["alice@example.org", "bob@example.org"]
    assert f"It ends on {allocation.ends_on:%Y-%m-%d}, in 14 days" in mailoutbox[0].body
    assert Notification.objects.get().kind == Notification.Kind.EXPIRES_SOON
    assert notifications_send(now=tomorrow + dt.timedelta(days=1)) == 0


def test_usage_and_expiry_of_one_run_share_one_mail(vision, cluster, mailoutbox):
    use(grant(vision, cluster, 10, ends_in_days=5), 8, "portal-dev:1")
    assert notifications_send() == 2
    body = mailoutbox[0].body
    assert "- 80% of its GPU-hours are used." in body
    assert "in 5 days" in body


def test_a_member_gets_nothing(people, vision, cluster, mailoutbox):
    _, _, charlie = people
    use(grant(vision, cluster, 10, ends_in_days=3), 10, "portal-dev:1")
    notifications_send()
    assert charlie.email not in recipients(mailoutbox)


def test_a_pi_without_an_address_is_skipped_and_logged(people, vision, cluster, mailoutbox, caplog):
    _, bob, _ = people
    bob.email = ""
    bob.save(update_fields=["email"])
    use(grant(vision, cluster, 10), 8, "portal-dev:1")
    with caplog.at_level(logging.WARNING, logger="accounts.notifications"):
        assert notifications_send() == 1
    assert recipients(mailoutbox) == ["alice@example.org"]
    assert "bob has no email address: not told usage_80" in caplog.text


def test_allocations_that_are_not_active_are_left_alone(vision, cluster, mailoutbox):
    allocation = grant(vision, cluster, 10, ends_in_days=3)
    use(allocation, 10, "portal-dev:1")
    Allocation.objects.filter(pk=allocation.pk).update(state=Allocation.State.REVOKED)
    assert notifications_send() == 0


def test_a_notice_claimed_by_another_run_is_not_sent_twice(vision, cluster, mailoutbox):
    allocation = grant(vision, cluster, 10)
    use(allocation, 8, "portal-dev:1")
    Notification.objects.create(allocation=allocation, kind="usage_80", claimed_at=timezone.now())
    assert notifications_send() == 0


def test_a_claim_left_by_a_crashed_run_is_taken_over(vision, cluster, mailoutbox):
    allocation = grant(vision, cluster, 10)
    use(allocation, 8, "portal-dev:1")
    crashed = timezone.now() - CLAIM_TIMEOUT - dt.timedelta(minutes=1)
    Notification.objects.create(allocation=allocation, kind="usage_80", claimed_at=crashed)

    assert notifications_send() == 2
    notice = Notification.objects.get()
    assert notice.sent_at is not None and notice.claimed_at > crashed


def test_when_the_mail_server_fails_the_next_run_tries_again(
    vision, cluster, mailoutbox, monkeypatch
):
    use(grant(vision, cluster, 10), 8, "portal-dev:1")

    def refuse(self, messages):
        raise smtplib.SMTPServerDisconnected("Connection unexpectedly closed")

    with monkeypatch.context() as patched:
        patched.setattr(EmailBackend, "send_messages", refuse)
        assert notifications_send() == 0
    assert not Notification.objects.exists()  # the claim was dropped

    assert notifications_send() == 2
    assert Notification.objects.get().sent_at is not None


def test_the_beat_task_sends_the_notices(vision, cluster, mailoutbox):
    use(grant(vision, cluster, 10), 8, "portal-dev:1")
    notifications_send_task()
    assert len(mailoutbox) == 2
    notifications_send_task()
    assert len(mailoutbox) == 2
