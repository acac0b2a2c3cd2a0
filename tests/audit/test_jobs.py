"""A PI acting on a member's job is recorded on the member's behalf; an owner's own is not."""

import pytest

from audit.models import AuditEvent
from jobs.models import Job
from tests.audit.conftest import make_job, only


def act(client, job, verb):
    return client.post(f"/api/v1/jobs/{job.pk}/{verb}/")


@pytest.fixture
def alices_job(alice, vision, partition):
    return make_job(owner=alice, project=vision, partition=partition)


def test_the_pi_cancelling_a_members_job_is_recorded(api, pat, alice, vision, alices_job):
    response = act(api(pat), alices_job, "cancel")
    assert response.status_code == 202, response.content
    event = only(AuditEvent.Action.JOB_CANCEL)
    assert (event.actor, event.on_behalf_of, event.scope) == (pat, alice, "vision")
    assert (event.target_type, event.target_id) == ("jobs.job", str(alices_job.pk))
    assert event.target_repr == f"#{alices_job.pk} train"
    assert event.detail == {"state": "pending", "slurm_job_id": alices_job.slurm_job_id, "as": "pi"}


def test_the_pi_cancelling_a_job_not_yet_in_slurm_is_recorded(
    client, pat, alice, vision, partition
):
    job = make_job(owner=alice, project=vision, partition=partition, state=Job.State.NEW)
    client.force_login(pat)
    assert client.post(f"/jobs/{job.pk}/cancel/").status_code == 302
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED
    event = only(AuditEvent.Action.JOB_CANCEL)
    assert (event.actor, event.on_behalf_of, event.detail["state"]) == (pat, alice, "new")


def test_the_pi_holding_and_releasing_a_members_job_is_recorded(api, pat, alice, alices_job):
    client = api(pat)
    assert act(client, alices_job, "hold").status_code == 202
    assert act(client, alices_job, "release").status_code == 202
    held, released = only(AuditEvent.Action.JOB_HOLD), only(AuditEvent.Action.JOB_RELEASE)
    assert (held.actor, held.on_behalf_of) == (pat, alice)
    assert (released.actor, released.on_behalf_of, released.target_id) == (
        pat,
        alice,
        str(alices_job.pk),
    )


def test_an_owner_acting_on_their_own_job_is_not_recorded(api, alice, alices_job):
    client = api(alice)
    assert act(client, alices_job, "hold").status_code == 202
    assert act(client, alices_job, "release").status_code == 202
    assert act(client, alices_job, "cancel").status_code == 202
    assert not AuditEvent.objects.filter(target_type="jobs.job").exists()


def test_refused_actions_on_a_members_job_are_not_recorded(api, pat, bob, alice, vision, partition):
    ended = make_job(owner=alice, project=vision, partition=partition, state=Job.State.COMPLETED)
    assert act(api(pat), ended, "cancel").status_code == 400  # it has already ended
    running = make_job(owner=alice, project=vision, partition=partition, state=Job.State.RUNNING)
    assert act(api(pat), running, "hold").status_code == 400  # only a pending job
    pending = make_job(owner=alice, project=vision, partition=partition)
    assert act(api(bob), pending, "cancel").status_code == 404  # a teammate, not the PI
    assert not AuditEvent.objects.filter(target_type="jobs.job").exists()
