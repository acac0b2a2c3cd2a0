"""GET jobs/: the user's own jobs newest first, by cursor; a project's for its PI and
co-PIs; filters by state and search; a constant number of queries per page."""

import json

import pytest
from rest_framework.utils.encoders import JSONEncoder

from tests.api.conftest import error_of, make_job
from tests.factories import bulk_jobs

pytestmark = pytest.mark.slurm


def ids(response) -> list[int]:
    return [job["id"] for job in response.json()["results"]]


def test_a_user_lists_only_their_own_jobs_newest_first(api, alice, bob, project):
    older = make_job(owner=alice, project=project, name="older")
    newer = make_job(owner=alice, project=project, name="newer")
    make_job(owner=bob, project=project, name="bobs")
    response = api(alice).get("/api/v1/jobs/")
    assert response.status_code == 200
    assert ids(response) == [newer.pk, older.pk]
    listed = response.json()["results"][0]
    assert listed["owner"] == "alice" and listed["project"] == project.slug
    assert "rendered_script" not in listed and "script" not in listed  # GET jobs/{id}/ has them


def test_the_pi_gets_the_projects_jobs_by_asking_for_the_project(api, alice, bob, pat, project):
    mine = make_job(owner=alice, project=project)
    theirs = make_job(owner=bob, project=project)
    client = api(pat)
    assert ids(client.get("/api/v1/jobs/")) == []  # without project=: only the PI's own
    assert ids(client.get(f"/api/v1/jobs/?project={project.slug}")) == [theirs.pk, mine.pk]


def test_a_member_asking_for_the_project_gets_only_their_own(api, alice, bob, project):
    mine = make_job(owner=alice, project=project)
    make_job(owner=bob, project=project)
    assert ids(api(alice).get(f"/api/v1/jobs/?project={project.slug}")) == [mine.pk]


def test_an_outsider_asking_for_the_project_is_refused(api, charlie, alice, project):
    make_job(owner=alice, project=project)
    response = api(charlie).get(f"/api/v1/jobs/?project={project.slug}")
    assert response.status_code == 400
    assert "project" in error_of(response)["fields"]


def test_it_filters_by_state_and_searches_names_and_ids(api, alice, project):
    running = make_job(owner=alice, project=project, state="running", name="resnet")
    failed = make_job(owner=alice, project=project, state="failed", slurm_job_id=4242)
    make_job(owner=alice, project=project, state="completed")
    client = api(alice)
    assert ids(client.get("/api/v1/jobs/?state=running")) == [running.pk]
    assert ids(client.get("/api/v1/jobs/?state=running,failed")) == [failed.pk, running.pk]
    assert ids(client.get("/api/v1/jobs/?search=resn")) == [running.pk]
    assert ids(client.get("/api/v1/jobs/?search=4242")) == [failed.pk]
    assert ids(client.get(f"/api/v1/jobs/?search=%23{running.pk}")) == [running.pk]


def test_an_unknown_state_is_a_400(api, alice, project):
    response = api(alice).get("/api/v1/jobs/?state=done")
    assert response.status_code == 400
    assert "state" in error_of(response)["fields"]


def test_the_cursor_pages_through_every_job_once(api, alice, project):
    created = bulk_jobs(owner=alice, project=project, count=120)
    client = api(alice)
    seen, url = [], "/api/v1/jobs/"
    while url:
        page = client.get(url).json()
        assert len(page["results"]) <= 50
        seen += [job["id"] for job in page["results"]]
        url = page["next"]
    assert sorted(seen) == sorted(job.pk for job in created)
    assert len(seen) == len(set(seen)) == 120
    small = client.get("/api/v1/jobs/?page_size=7").json()
    assert len(small["results"]) == 7 and small["next"]


def test_a_forged_cursor_is_a_400(api, alice, project):
    response = api(alice).get("/api/v1/jobs/?cursor=abc")
    assert response.status_code == 400
    assert "cursor" in error_of(response)["fields"]


@pytest.mark.parametrize("project_filter", [False, True])
def test_a_page_takes_the_same_queries_however_many_jobs(
    api, alice, pat, project, project_filter, django_assert_max_num_queries
):
    bulk_jobs(owner=alice, project=project, count=60)
    jobs = bulk_jobs(owner=pat, project=project, count=60)
    for job in jobs[:20]:
        job.depends_on.set(jobs[20:23])
    client = api(pat)
    url = f"/api/v1/jobs/?project={project.slug}" if project_filter else "/api/v1/jobs/"
    client.get(url)  # the token's last-used write happens on the first call
    # Token, (membership), page, dependencies: however many jobs and dependencies.
    with django_assert_max_num_queries(4):
        page = client.get(url).json()
    assert len(page["results"]) == 50
    assert any(job["depends_on"] for job in page["results"])


def test_anonymous_gets_a_401(anonymous):
    response = anonymous.get("/api/v1/jobs/")
    assert response.status_code == 401


def test_the_list_shows_each_job_exactly_as_its_serializer_does(api, alice, project):
    """The page is built from rows (jobs/serializers.py job_list_items) for speed; it must be the
    schema's JobListItemSerializer shape, value for value, whatever the job holds."""
    import datetime as dt
    from decimal import Decimal

    from django.contrib.postgres.expressions import ArraySubquery
    from django.db.models import OuterRef
    from django.utils import timezone

    from jobs.models import Job, JobTemplate
    from jobs.serializers import JobListItemSerializer

    template = JobTemplate.objects.create(
        owner=alice, name="mine", scope=JobTemplate.Scope.USER, script="true\n"
    )
    first = make_job(owner=alice, project=project, state="completed", used_gpu_seconds=1234,
                     exit_code=0, slurm_job_id=77, ended_at=timezone.now())  # fmt: skip
    make_job(
        owner=alice,
        project=project,
        state="pending",
        template=template,
        environment={"SEED": "7", "EMPTY": ""},
        array="0-9%2",
        array_tasks=10,
        billing_weight=Decimal("1.250"),
        started_at=timezone.now() - dt.timedelta(microseconds=1),
        reason="Priority",
    ).depends_on.set([first])
    response = api(alice).get("/api/v1/jobs/")
    dependencies = Job.depends_on.through.objects.filter(from_job=OuterRef("pk")).values(
        "to_job_id"
    )
    jobs = Job.objects.filter(owner=alice).annotate(depends_on_ids=ArraySubquery(dependencies))
    expected = JobListItemSerializer(jobs.order_by("-created_at", "-id"), many=True).data
    assert response.json()["results"] == json.loads(json.dumps(expected, cls=JSONEncoder))
