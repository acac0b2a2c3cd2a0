"""Job-end mail on the dev cluster: real jobs run to their end, the accounting ingest
finishes them, and the send mails their owner once."""

import pytest
from django.core import mail
from django.utils import timezone

from jobs.job_mail import job_mails_send
from jobs.models import Job, JobEndMail
from jobs.services import job_create
from jobs.states import JobState
from tests.factories import request_for, run_to_the_end, wait_for
from tests.jobs.test_job_mail import LATER

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _mail_settings(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.JOB_MAIL_DIGEST_S = 180


@pytest.fixture
def researcher(alice):
    alice.email = "alice@example.org"
    alice.save(update_fields=["email"])
    return alice


def submitted(job: Job) -> Job:
    wait_for(lambda: Job.objects.get(pk=job.pk).slurm_job_id, what="the job to be submitted")
    return run_to_the_end(job)


def test_a_failed_job_sends_one_mail_to_its_owner(
    celery_worker, make_project, researcher, bob, workdir
):
    project = make_project(members={researcher: "pi", bob: "member"}, gpu_hours=10)
    job = submitted(
        job_create(
            user=researcher,
            request=request_for(project, workdir, gpus_per_node=0, script="exit 1\n"),
        )
    )
    assert job.state == JobState.FAILED
    assert job_mails_send(now=timezone.now() + LATER) == 1
    (message,) = mail.outbox
    assert message.to == ["alice@example.org"]
    assert f"Slurm job {job.slurm_job_id} on" in message.body
    assert "Exit code 1, ran 0:00:0" in message.body
    assert job_mails_send(now=timezone.now() + 2 * LATER) == 0
    assert len(mail.outbox) == 1


def test_an_array_of_100_failing_tasks_sends_one_mail(
    celery_worker, make_project, researcher, workdir
):
    project = make_project(members={researcher: "pi"}, gpu_hours=10)
    job = submitted(
        job_create(
            user=researcher,
            request=request_for(project, workdir, gpus_per_node=0, array="0-99", script="exit 1\n"),
        )
    )
    assert job.state == JobState.FAILED
    assert JobEndMail.objects.filter(job=job).count() == 1
    assert job_mails_send(now=timezone.now() + LATER) == 1
    (message,) = mail.outbox
    assert "an array of 100 tasks" in message.body
    assert message.body.count("/jobs/") == 1
