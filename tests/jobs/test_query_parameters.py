"""Malformed query parameters on the job pages and the job list API: a 400, a 404 or
ignored, never a 500 (issue 17; each case here was a 500 the crawl found)."""

import pytest

from jobs.models import Job
from tests.factories import bulk_jobs
from tests.security.conftest import funded_project, offline_cluster_create, person

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice():
    return person("qp-alice", posix="alice")


@pytest.fixture
def project(alice):
    cluster = offline_cluster_create()
    return funded_project("qp-alpha", cluster=cluster, members={alice: "member"})


@pytest.fixture
def signed_in(client, alice):
    client.raise_request_exception = False
    client.force_login(alice)
    return client


@pytest.mark.parametrize("parameter", ["from", "template"])
@pytest.mark.parametrize("value", ["abc", "1.5", "%C2%B2", "%00", "-1", "1&{p}=abc"])
def test_the_composer_refuses_an_id_that_is_not_a_number(signed_in, project, parameter, value):
    response = signed_in.get(f"/jobs/new/?{parameter}={value.format(p=parameter)}")
    assert response.status_code == 400


@pytest.mark.parametrize("parameter", ["from", "template"])
@pytest.mark.parametrize("value", ["0", str(2**63), str(10**30), "9" * 5000])
def test_the_composer_says_not_found_for_an_id_no_row_has(signed_in, project, parameter, value):
    assert signed_in.get(f"/jobs/new/?{parameter}={value}").status_code == 404


def test_the_composer_still_starts_from_a_job_of_mine(signed_in, alice, project):
    [job] = bulk_jobs(owner=alice, project=project, count=1, name="again")
    response = signed_in.get(f"/jobs/new/?from={job.pk}")
    assert response.status_code == 200
    assert 'value="again0"' in response.content.decode()


def test_a_search_with_a_nul_matches_nothing(signed_in, alice, project):
    bulk_jobs(owner=alice, project=project, count=2)
    response = signed_in.get("/jobs/?q=bulk%00")
    assert response.status_code == 200
    assert response.context["jobs"] == []


@pytest.mark.parametrize("value", ["%00", "a%00b", "not%20a%20slug", "%C3%A9t%C3%A9"])
def test_a_project_filter_that_is_not_a_slug_is_ignored(signed_in, alice, project, value):
    bulk_jobs(owner=alice, project=project, count=2)
    response = signed_in.get(f"/jobs/?project={value}")
    assert response.status_code == 200
    assert len(response.context["jobs"]) == 2
    assert response.context["filters"]["project"] == ""


def test_a_search_for_a_superscript_digit_is_a_name_search(signed_in, alice, project):
    bulk_jobs(owner=alice, project=project, count=1, name="x²")
    bulk_jobs(owner=alice, project=project, count=1, name="y")
    response = signed_in.get("/jobs/?q=%C2%B2")
    assert response.status_code == 200
    assert [job.name for job in response.context["jobs"]] == ["x²0"]


def test_the_api_searches_for_a_superscript_digit_by_name(signed_in, alice, project):
    bulk_jobs(owner=alice, project=project, count=1, name="x²")
    response = signed_in.get("/api/v1/jobs/?search=%C2%B2")
    assert response.status_code == 200
    assert [job["name"] for job in response.json()["results"]] == ["x²0"]
    assert Job.objects.count() == 1
