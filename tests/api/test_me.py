"""GET /api/v1/me/: who the token belongs to, with their projects and roles."""

import pytest

from tests.api.conftest import error_of


@pytest.mark.slurm
def test_it_says_who_calls_with_their_projects(api, alice, project):
    response = api(alice).get("/api/v1/me/")
    assert response.status_code == 200
    me = response.json()
    assert me["username"] == "alice"
    assert me["posix_username"] == "alice"
    assert me["is_allocation_manager"] is False
    assert me["projects"] == [{"slug": project.slug, "name": project.name, "role": "member"}]


@pytest.mark.django_db
def test_an_allocation_manager_is_told_so(api, olga):
    me = api(olga).get("/api/v1/me/").json()
    assert me["is_allocation_manager"] is True
    assert me["projects"] == []


@pytest.mark.django_db
def test_anonymous_is_refused_with_401(anonymous):
    response = anonymous.get("/api/v1/me/")
    assert response.status_code == 401
    assert error_of(response)["code"] == "not_authenticated"
    assert response["WWW-Authenticate"].startswith("Bearer")
