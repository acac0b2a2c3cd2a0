"""Mail to a researcher when their jobs end: queued by the accounting ingest, sent by the
worker as one digest per researcher once the window has passed, each end exactly once,
as their preference says."""

import datetime as dt
import smtplib

import pytest
from django.core import mail
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from clusters.slurm.states import SlurmJobState
from jobs.accounting import accounting_ingest
from jobs.job_mail import CLAIM_TIMEOUT, Queued, digests, job_mails_send, wants_mail
from jobs.models import JobEndMail
from jobs.states import JobState
from tests.jobs.test_accounting_ingest import cluster, entry, portal_job, project  # noqa: F401

WINDOW = dt.timedelta(seconds=180)
LATER = dt.timedelta(seconds=181)


@pytest.fixture(autouse=True)
def _mail_settings(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.JOB_MAIL_DIGEST_S = 180
    settings.PORTAL_BASE_URL = "https://portal.example.org"


@pytest.fixture
def alice_mailed(alice):
    alice.email = "alice@example.org"
    alice.save(update_fields=["email"])
    return alice


def failed(slurm_id: int, **fields):
    return entry(slurm_id, state=SlurmJobState.FAILED, exit_code=3, **fields)


# The digest's grouping, as pure logic.

T0 = dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC)


def test_an_owner_waits_until_their_oldest_end_has_waited_the_window():
    rows = [
        Queued(1, owner_id=7, created_at=T0),
        Queued(2, owner_id=7, created_at=T0 + dt.timedelta(seconds=170)),
        Queued(3, owner_id=8, created_at=T0 + dt.timedelta(seconds=60)),
    ]
    assert digests(rows, now=T0 + dt.timedelta(seconds=179), window=WINDOW) == {}
    # Owner 7's first end is due: the later one rides along in the same mail.
    assert digests(rows, now=T0 + WINDOW, window=WINDOW) == {7: [1, 2]}
    assert digests(rows, now=T0 + dt.timedelta(seconds=240), window=WINDOW) == {
        7: [1, 2],
        8: [3],
    }


@given(
    st.lists(st.tuples(st.integers(1, 4), st.integers(0, 600)), max_size=30, unique_by=lambda r: r),
    st.integers(0, 900),
    st.integers(0, 300),
)
def test_every_row_of_an_owner_goes_together_and_only_when_due(rows, now_s, window_s):
    queued = [
        Queued(pk, owner_id=owner, created_at=T0 + dt.timedelta(seconds=at))
        for pk, (owner, at) in enumerate(rows)
    ]
    now, window = T0 + dt.timedelta(seconds=now_s), dt.timedelta(seconds=window_s)
    due = digests(queued, now=now, window=window)
    for owner in {row.owner_id for row in queued}:
        its = [row for row in queued if row.owner_id == owner]
        oldest = min(row.created_at for row in its)
        if oldest <= now - window:
            assert due[owner] == sorted(row.pk for row in its)
        else:
            assert owner not in due
    assert set(due) <= {row.owner_id for row in queued}


@pytest.mark.parametrize(
    ("preference", "mailed"),
    [
        ("all", set(JobState)),
        (
            "failures",
            {
                JobState.FAILED,
                JobState.TIMEOUT,
                JobState.OUT_OF_MEMORY,
                JobState.NODE_FAIL,
                JobState.PREEMPTED,
            },
        ),
        ("never", set()),
    ],
)
def test_the_preference_says_which_ends_are_mailed(preference, mailed):
    ends = {
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.TIMEOUT,
        JobState.OUT_OF_MEMORY,
        JobState.NODE_FAIL,
        JobState.PREEMPTED,
    }
    assert {state for state in ends if wants_mail(preference, state)} == ends & mailed


# With the accounting ingest, on recorded Slurm records.


def test_a_failed_job_sends_one_mail_to_its_owner_with_what_it_did(
    cluster,  # noqa: F811
    project,  # noqa: F811
    alice_mailed,
):
    job = portal_job(project, cluster, alice_mailed, slurm_job_id=700)
    assert accounting_ingest(cluster=cluster, entries=[failed(700)]).finished_jobs == 1
    assert job_mails_send() == 0, "not before the window has passed"
    assert mail.outbox == []

    assert job_mails_send(now=timezone.now() + LATER) == 1
    (message,) = mail.outbox
    assert message.to == ["alice@example.org"]
    assert message.subject == f"[Slurm GPU Portal] Your job {job.pk} “train” ended: Failed"
    assert "Slurm job 700 on recorded" in message.body
    # 2 GPUs x 600 s x weight 1.5 = 0.50 GPU-hours; it ran 10 minutes.
    assert "Exit code 3, ran 0:10:00, 0.50 GPU-hours charged" in message.body
    assert f"https://portal.example.org/jobs/{job.pk}/" in message.body
    row = JobEndMail.objects.get(job=job)
    assert row.sent_at is not None and row.recipient == "alice@example.org"

    # Reading accounting again and another run send nothing more.
    accounting_ingest(cluster=cluster, entries=[failed(700)])
    assert job_mails_send(now=timezone.now() + 2 * LATER) == 0
    assert len(mail.outbox) == 1 and JobEndMail.objects.count() == 1


def test_jobs_ending_within_the_window_come_in_one_mail(
    cluster,  # noqa: F811
    project,  # noqa: F811
    alice_mailed,
):
    jobs = [portal_job(project, cluster, alice_mailed, slurm_job_id=710 + i) for i in range(5)]
    accounting_ingest(cluster=cluster, entries=[failed(710), failed(711)])
    accounting_ingest(
        cluster=cluster,
        entries=[failed(712), entry(713, state=SlurmJobState.TIMEOUT, exit_code=0), failed(714)],
    )
    assert job_mails_send(now=timezone.now() + LATER) == 1
    (message,) = mail.outbox
    assert message.subject == "[Slurm GPU Portal] 5 of your jobs ended, 5 of them failed"
    for job in jobs:
        assert f"/jobs/{job.pk}/" in message.body
    assert "Timed out" in message.body


def test_failures_only_skips_a_completed_job(
    cluster,  # noqa: F811
    project,  # noqa: F811
    alice_mailed,
):
    portal_job(project, cluster, alice_mailed, slurm_job_id=720)
    accounting_ingest(cluster=cluster, entries=[entry(720)])  # completed
    assert JobEndMail.objects.count() == 0
    assert job_mails_send(now=timezone.now() + LATER) == 0 and mail.outbox == []


def test_every_job_mails_a_completed_one_too(
    cluster,  # noqa: F811
    project,  # noqa: F811
    alice_mailed,
):
    alice_mailed.job_mail = "all"
    alice_mailed.save(update_fields=["job_mail"])
    job = portal_job(project, cluster, alice_mailed, slurm_job_id=721)
    accounting_ingest(cluster=cluster, entries=[entry(721)])
    assert job_mails_send(now=timezone.now() + LATER) == 1
    assert mail.outbox[0].subject.endswith(f"Your job {job.pk} “train” ended: Completed")


def test_no_mail_for_a_user_whose_preference_is_never(
    cluster,  # noqa: F811
    project,  # noqa: F811
    alice_mailed,
):
    portal_job(project, cluster, alice_mailed, slurm_job_id=730)
    portal_job(project, cluster, alice_mailed, slurm_job_id=731)
    accounting_ingest(cluster=cluster, entries=[failed(730)])
    # Switched off after the first job ended, before its mail went: nothing is sent.
    alice_mailed.job_mail = "never"
    alice_mailed.save(update_fields=["job_mail"])
    accounting_ingest(cluster=cluster, entries=[failed(731)])
    assert job_mails_send(now=timezone.now() + LATER) == 0
    assert mail.outbox == []
    (row,) = JobEndMail.objects.all()
    assert row.sent_at is not None and row.recipient == ""


def test_a_japanese_speaker_is_written_to_in_japanese(
    cluster,  # noqa: F811
    project,  # noqa: F811
    alice_mailed,
):
    alice_mailed.mail_language = "ja"
    alice_mailed.save(update_fields=["mail_language"])
    portal_job(project, cluster, alice_mailed, slurm_job_id=740)
    accounting_ingest(cluster=cluster, entries=[failed(740)])
    assert job_mails_send(now=timezone.now() + LATER) == 1
    (message,) = mail.outbox
    assert "失敗" in message.subject and "Failed" not in message.body


def test_a_mail_server_that_is_down_leaves_the_ends_for_the_next_run(
    cluster,  # noqa: F811
    project,  # noqa: F811
    alice_mailed,
    settings,
):
    job = portal_job(project, cluster, alice_mailed, slurm_job_id=750)
    accounting_ingest(cluster=cluster, entries=[failed(750)])
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", 9  # nothing listens there
    with pytest.raises(OSError):
        smtplib.SMTP("127.0.0.1", 9, timeout=2)
    assert job_mails_send(now=timezone.now() + LATER) == 0
    row = JobEndMail.objects.get(job=job)
    assert row.sent_at is None and row.claimed_at is None

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    assert job_mails_send(now=timezone.now() + LATER) == 1
    assert len(mail.outbox) == 1


def test_a_claim_left_by_a_dead_run_is_taken_over_after_the_timeout(
    cluster,  # noqa: F811
    project,  # noqa: F811
    alice_mailed,
):
    job = portal_job(project, cluster, alice_mailed, slurm_job_id=760)
    accounting_ingest(cluster=cluster, entries=[failed(760)])
    later = timezone.now() + LATER
    JobEndMail.objects.filter(job=job).update(claimed_at=later)  # a run that died
    assert job_mails_send(now=later + dt.timedelta(minutes=5)) == 0
    assert mail.outbox == []
    assert job_mails_send(now=later + CLAIM_TIMEOUT + dt.timedelta(seconds=1)) == 1
    assert len(mail.outbox) == 1
