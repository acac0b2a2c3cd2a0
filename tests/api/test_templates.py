"""GET/POST templates/: the user's own, shared with a project its PI or co-PIs lead,
and global ones that only allocation managers publish."""

import pytest

from jobs.models import JobTemplate
from tests.api.conftest import error_of

pytestmark = pytest.mark.slurm


@pytest.fixture(autouse=True)
def _only_the_tests_templates(db):
    # A migration ships a few global templates; these tests count their own.
    JobTemplate.objects.all().delete()


def create(client, **body):
    return client.post("/api/v1/templates/", body, content_type="application/json")


def test_a_user_creates_a_template_of_their_own(api, alice):
    response = create(
        api(alice),
        name="train",
        description="ResNet on 2 GPUs",
        defaults={"gpus_per_node": 2, "time_limit_minutes": 120, "environment": {"E": "1"}},
        script="python train.py\n",
    )
    assert response.status_code == 201
    shown = response.json()
    assert shown["scope"] == "user" and shown["owner"] == "alice" and shown["project"] is None
    template = JobTemplate.objects.get(pk=shown["id"])
    assert template.defaults == {
        "gpus_per_node": 2,
        "time_limit_minutes": 120,
        "environment": {"E": "1"},
    }
    assert template.script == "python train.py\n"


def test_the_list_has_what_the_user_may_use(api, alice, bob, charlie, project):
    JobTemplate.objects.create(name="alices", scope="user", owner=alice, script="a\n")
    JobTemplate.objects.create(name="bobs", scope="user", owner=bob, script="b\n")
    JobTemplate.objects.create(name="team", scope="project", project=project, script="t\n")
    JobTemplate.objects.create(name="everyone", scope="global", script="g\n")
    names = lambda user: {t["name"] for t in api(user).get("/api/v1/templates/").json()}  # noqa: E731
    assert names(alice) == {"alices", "team", "everyone"}
    assert names(charlie) == {"everyone"}


def test_the_pi_shares_a_template_with_the_project(api, pat, bob, project):
    response = create(api(pat), name="team", scope="project", project=project.slug, script="t\n")
    assert response.status_code == 201
    assert response.json()["project"] == project.slug
    assert "team" in {t["name"] for t in api(bob).get("/api/v1/templates/").json()}


def test_a_member_may_not_share_with_the_project(api, alice, project):
    response = create(api(alice), name="team", scope="project", project=project.slug, script="t\n")
    assert response.status_code == 403
    assert error_of(response)["code"] == "permission_denied"
    assert not JobTemplate.objects.exists()


def test_an_outsider_cannot_name_the_project(api, charlie, project):
    response = create(api(charlie), name="x", scope="project", project=project.slug, script="t\n")
    assert response.status_code == 400
    assert "project" in error_of(response)["fields"]


def test_only_allocation_managers_publish_global_templates(api, alice, olga):
    refused = create(api(alice), name="all", scope="global", script="g\n")
    assert refused.status_code == 403
    published = create(api(olga), name="all", scope="global", script="g\n")
    assert published.status_code == 201
    assert JobTemplate.objects.get().scope == "global"


@pytest.mark.parametrize(
    ("defaults", "field"),
    [
        ({"colour": "blue"}, "defaults"),
        ({"script": "x"}, "defaults"),
        ({"depends_on": [1]}, "defaults"),
        ({"nodes": "two"}, "defaults.nodes"),
        ({"environment": "A=1"}, "defaults.environment"),
        ({"requeue": "sometimes"}, "defaults.requeue"),
    ],
)
def test_defaults_must_be_job_fields_of_the_right_type(api, alice, defaults, field):
    response = create(api(alice), name="t", defaults=defaults, script="t\n")
    assert response.status_code == 400
    assert field in error_of(response)["fields"]
    assert not JobTemplate.objects.exists()


# A value for every field the API advertises (its help text names them).
ADVERTISED = {
    "partition": "debug",
    "name": "nightly",
    "nodes": 1,
    "gpus_per_node": 2,
    "cpus_per_gpu": 4,
    "mem_per_gpu_gb": 8,
    "time_limit_minutes": 90,
    "working_directory": "/home/alice/runs",
    "output_path": "out-%j.txt",
    "error_path": "err-%j.txt",
    "environment": {"EPOCHS": "3"},
    "array": "0-3",
    "requeue": True,
}


def test_every_field_the_api_advertises_is_taken(api, alice, client):
    schema = client.get("/api/schema/?format=json").json()
    advertised = schema["components"]["schemas"]["TemplateCreateRequest"]["properties"]
    named = advertised["defaults"]["description"].split(": ", 1)[1].split(", ")
    assert sorted(named) == sorted(ADVERTISED)
    response = create(api(alice), name="all of it", defaults=ADVERTISED, script="t\n")
    assert response.status_code == 201, response.json()
    assert JobTemplate.objects.get().defaults == ADVERTISED


@pytest.mark.parametrize("field", ["project", "cluster"])
def test_who_pays_and_where_are_not_a_templates_to_set(api, alice, field):
    response = create(api(alice), name="t", defaults={field: "x"}, script="t\n")
    assert response.status_code == 400
    assert field in error_of(response)["message"] + str(error_of(response)["fields"])


def test_a_template_needs_a_name_and_a_script(api, alice):
    response = create(api(alice))
    assert response.status_code == 400
    assert {"name", "script"} <= set(error_of(response)["fields"])


def test_anonymous_gets_a_401(anonymous):
    assert anonymous.get("/api/v1/templates/").status_code == 401
