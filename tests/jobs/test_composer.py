"""The composer greets a new user without errors: a blank form's preview shows the
script skeleton and its cost, and a field is marked only once something was typed
in it or the form was submitted (issue 17). Nothing here reaches Slurm."""

import pytest

from tests.security.conftest import funded_project, offline_cluster_create, person

pytestmark = pytest.mark.django_db

REQUIRED = "This field is required"
FIX = "Fix the fields marked in red"


@pytest.fixture
def alice():
    return person("composer-alice", posix="alice")


@pytest.fixture
def project(alice):
    return funded_project(
        "composer-alpha", cluster=offline_cluster_create(), members={alice: "member"}
    )


@pytest.fixture
def signed_in(client, alice):
    client.force_login(alice)
    return client


def blank_form(project) -> dict:
    """What the browser sends for the composer as it first loads: its initial values."""
    return {
        "project": project.slug,
        "template": "",
        "partition": "debug",
        "name": "job",
        "nodes": "1",
        "gpus_per_node": "1",
        "cpus_per_gpu": "",
        "mem_per_gpu_gb": "",
        "time_limit_minutes": "60",
        "working_directory": "",
        "output_path": "",
        "error_path": "",
        "array": "",
        "environment": "",
        "script": "",
    }


def test_a_new_composer_shows_no_error(signed_in, project):
    html = signed_in.get("/jobs/new/").content.decode()
    assert REQUIRED not in html
    assert FIX not in html


def test_a_blank_forms_preview_shows_the_skeleton_and_its_cost(signed_in, project):
    response = signed_in.post("/jobs/new/preview/", blank_form(project))
    html = response.content.decode()
    assert response.status_code == 200
    assert REQUIRED not in html
    assert FIX not in html
    assert "#SBATCH --gpus-per-node=1" in html
    assert "# Your commands go here" in html
    assert "1 GPU-h" in html  # one GPU for the default hour
    assert "of 100 GPU-h available" in html


def test_a_field_emptied_by_the_user_is_named_not_marked(signed_in, project):
    response = signed_in.post("/jobs/new/preview/", blank_form(project) | {"nodes": ""})
    html = response.content.decode()
    assert REQUIRED not in html
    assert "Fill in Nodes to see the script and its cost." in html


def test_a_value_typed_wrong_is_marked_at_once(signed_in, project):
    response = signed_in.post("/jobs/new/preview/", blank_form(project) | {"gpus_per_node": "99"})
    html = response.content.decode()
    assert "has at most 8 GPUs per node" in html
    assert FIX in html


def test_submitting_a_blank_script_marks_it(signed_in, project):
    response = signed_in.post("/jobs/new/", blank_form(project))
    assert response.status_code == 400
    assert REQUIRED in response.content.decode()


def test_the_preview_of_a_project_without_an_allocation_says_so(signed_in, alice, project):
    from accounts.services import membership_set, project_create

    broke = project_create(slug="composer-broke", name="Broke", slurm_account="composer-broke")
    membership_set(project=broke, user=alice, role="member")
    response = signed_in.post("/jobs/new/preview/", blank_form(broke))
    assert response.status_code == 200
    assert "has no active GPU-hour allocation" in response.content.decode()


def test_a_user_in_no_project_is_told_to_choose_one_not_failed(client):
    client.force_login(person("composer-nobody", posix="charlie"))
    assert client.get("/jobs/new/").status_code == 200
    response = client.post("/jobs/new/preview/", {"script": "", "project": ""})
    assert response.status_code == 200
    assert REQUIRED not in response.content.decode()
