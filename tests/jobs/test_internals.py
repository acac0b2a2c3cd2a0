"""What jobs/internals.py relies on in Django and DRF still holds: a related set kept
with remember_related reads nothing more, a filter on it still asks the database, and a
shared serializer shows each object as a fresh one would."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.internals import remember_related, shared_serializer
from jobs.models import Job, JobEvent
from jobs.serializers import JobDetailSerializer
from tests.api.conftest import make_job

pytestmark = pytest.mark.slurm


def test_a_remembered_related_set_reads_nothing_and_a_filter_on_it_still_asks(
    alice, make_project, dev_cluster
):
    job = make_job(owner=alice, project=make_project(members={alice: "pi"}))
    events = list(JobEvent.objects.filter(job=job))
    fresh = Job.objects.get(pk=job.pk)
    remember_related(fresh, events=events)
    with CaptureQueriesContext(connection) as queries:
        assert list(fresh.events.all()) == events
    assert len(queries) == 0
    with CaptureQueriesContext(connection) as queries:
        assert fresh.events.filter(state="nonexistent").count() == 0
    assert len(queries) == 1


def test_a_shared_serializer_shows_each_job_as_a_fresh_one_does(alice, make_project, dev_cluster):
    project = make_project(members={alice: "pi"})
    first = make_job(owner=alice, project=project, name="first")
    second = make_job(owner=alice, project=project, name="second")
    shared = shared_serializer(JobDetailSerializer)
    assert shared is shared_serializer(JobDetailSerializer)
    for job in (first, second, first):
        assert shared.to_representation(job) == JobDetailSerializer(job).data
