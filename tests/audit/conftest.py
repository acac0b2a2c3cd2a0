"""Personas of the audit tests: manny manages allocations, pat leads the vision project
where alice and bob are members; nothing here needs Slurm."""

import datetime as dt

import pytest
from django.test import Client

from accounts.ledger import allocation_grant
from accounts.services import membership_set, project_create, user_create
from accounts.tokens import token_create
from audit.models import AuditEvent
from clusters.models import Partition
from clusters.services import cluster_register
from jobs.models import Job

TODAY = dt.date.today()


@pytest.fixture(autouse=True)
def _no_throttling(settings):
    settings.API_RATE = None
    settings.API_ANON_RATE = None


@pytest.fixture
def pat(db):
    return user_create(username="pat", password="pat-pass-1234", posix_username="pat")


@pytest.fixture
def cluster(db):
    return cluster_register(name="portal-dev")


@pytest.fixture
def partition(cluster):
    return Partition.objects.create(cluster=cluster, name="gpu", gpus_per_node=8, total_gpus=8)


@pytest.fixture
def vision(db, pat, alice, bob):
    project = project_create(slug="vision", name="Vision Lab", slurm_account="vision")
    membership_set(project=project, user=pat, role="pi")
    membership_set(project=project, user=alice, role="member")
    membership_set(project=project, user=bob, role="member")
    return project


@pytest.fixture
def allocation(vision, cluster):
    return allocation_grant(
        project=vision,
        cluster=cluster,
        gpu_hours=100,
        starts_on=TODAY,
        ends_on=TODAY + dt.timedelta(days=30),
        actor=None,
        reason="start",
    )


@pytest.fixture
def api():
    """api(user): a test client that calls as ``user`` with a fresh bearer token."""

    def client_of(user) -> Client:
        _, plain = token_create(user=user, name="tests")
        return Client(headers={"Authorization": f"Bearer {plain}"})

    return client_of


def make_job(*, owner, project, partition, state=Job.State.PENDING) -> Job:
    """A job row as the pipeline leaves it; no Slurm involved (actions only enqueue tasks)."""
    home = f"/home/{owner.posix_username}"
    return Job.objects.create(
        owner=owner,
        project=project,
        cluster=partition.cluster,
        partition=partition,
        name="train",
        gpus_per_node=1,
        time_limit_minutes=5,
        working_directory=home,
        output_path=f"{home}/slurm-%j.out",
        error_path=f"{home}/slurm-%j.out",
        script="echo hi\n",
        rendered_script="#!/bin/bash\necho hi\n",
        billing_weight=partition.billing_weight,
        requested_gpu_seconds=300,
        state=state,
        slurm_job_id=None if state == Job.State.NEW else 4242 + Job.objects.count(),
    )


def events(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("pk"))


def only(action: str) -> AuditEvent:
    found = events(action)
    assert len(found) == 1, found
    return found[0]
