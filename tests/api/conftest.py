"""Personas and factories of the API tests: every call goes through a URL with the test client.

alice and bob are members of one project, pat is its PI, charlie is in no
project, olga is an allocation manager. Scripts call with a bearer token; the
browser persona logs in with a session.
"""

import datetime as dt
import uuid

import pytest
from django.test import Client
from django.utils import timezone

from accounts.groups import ALLOCATION_MANAGERS
from accounts.models import PersonalAccessToken
from accounts.services import user_create
from accounts.tokens import token_create
from clusters.models import Partition
from jobs.models import Job, JobEvent


@pytest.fixture(autouse=True)
def _no_throttling(settings):
    # Rate limits have their own tests; elsewhere they would make results depend on
    # how many tests ran in the last minute.
    settings.API_RATE = None
    settings.API_ANON_RATE = None


@pytest.fixture
def pat(db):
    return user_create(username="pat", password="pat-pass-1234", posix_username="pat")


@pytest.fixture
def olga(db):
    return user_create(
        username="olga",
        password="olga-pass-1234",
        posix_username="olga",
        groups=(ALLOCATION_MANAGERS,),
    )


def token_client(user, **token) -> Client:
    _, plain = token_create(user=user, name="tests", **token)
    return Client(headers={"Authorization": f"Bearer {plain}"})


@pytest.fixture
def api():
    """api(user): a test client that calls as ``user`` with a fresh bearer token."""
    return token_client


@pytest.fixture
def anonymous() -> Client:
    return Client()


@pytest.fixture
def expired_token(alice) -> Client:
    token, plain = token_create(user=alice, name="old")
    PersonalAccessToken.objects.filter(pk=token.pk).update(
        expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    return Client(headers={"Authorization": f"Bearer {plain}"})


@pytest.fixture
def revoked_token(alice) -> Client:
    token, plain = token_create(user=alice, name="gone")
    PersonalAccessToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    return Client(headers={"Authorization": f"Bearer {plain}"})


@pytest.fixture
def project(make_project, alice, bob, pat):
    """A funded project (10 GPU-hours on the dev cluster): pat is its PI, alice and bob members."""
    return make_project(
        members={pat: "pi", alice: "member", bob: "member"}, gpu_hours=10, in_slurm=False
    )


def make_job(*, owner, project, state=Job.State.PENDING, name="train", **fields) -> Job:
    """A job row as the pipeline leaves it (no Slurm involved): for the read endpoints."""
    partition = Partition.objects.get(cluster__name="portal-dev", name="debug")
    home = f"/home/{owner.posix_username}"
    values = {
        "owner": owner,
        "project": project,
        "cluster": partition.cluster,
        "partition": partition,
        "name": name,
        "gpus_per_node": 1,
        "time_limit_minutes": 5,
        "working_directory": home,
        "output_path": f"{home}/slurm-%j.out",
        "error_path": f"{home}/slurm-%j.out",
        "script": "echo hi\n",
        "rendered_script": "#!/bin/bash\necho hi\n",
        "billing_weight": partition.billing_weight,
        "requested_gpu_seconds": 300,
        "state": state,
        **fields,
    }
    job = Job.objects.create(**values)
    JobEvent.objects.create(job=job, at=job.created_at, state=Job.State.NEW, detail="held")
    return job


def error_of(response) -> dict:
    """The error object of a refusal, after checking it has the one shape."""
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert {"code", "message", "fields"} <= set(error), error
    assert isinstance(error["message"], str) and error["message"]
    return error


def new_key() -> str:
    return str(uuid.uuid4())
