"""A researcher's preferences for job-end mail: the page, GET/PATCH /api/v1/me/."""

import pytest
from django.urls import reverse

from accounts.tokens import token_create

pytestmark = pytest.mark.django_db


def api_client(client, user):
    _, plain = token_create(user=user, name="prefs")
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {plain}"
    return client


def test_the_default_is_failures_only_in_the_portals_language(alice, client):
    me = api_client(client, alice).get(reverse("api:me")).json()
    assert (me["job_mail"], me["mail_language"]) == ("failures", "")


def test_a_researcher_sets_their_preference_on_the_page(alice, bob, client):
    client.force_login(alice)
    page = client.get(reverse("preferences"))
    assert page.status_code == 200
    assert b'value="failures" selected' in page.content
    response = client.post(reverse("preferences"), {"job_mail": "never", "mail_language": "ja"})
    assert response.status_code == 302 and response["Location"] == reverse("preferences")
    alice.refresh_from_db()
    bob.refresh_from_db()
    assert (alice.job_mail, alice.mail_language) == ("never", "ja")
    assert bob.job_mail == "failures"  # only the caller's own


def test_the_page_refuses_a_value_it_does_not_offer(alice, client):
    client.force_login(alice)
    response = client.post(reverse("preferences"), {"job_mail": "sometimes", "mail_language": "en"})
    assert response.status_code == 400
    alice.refresh_from_db()
    assert alice.job_mail == "failures"


def test_patch_me_changes_what_it_is_given_and_nothing_else(alice, client):
    api = api_client(client, alice)
    url = reverse("api:me")
    response = api.patch(url, {"job_mail": "all"}, content_type="application/json")
    assert response.status_code == 200 and response.json()["job_mail"] == "all"
    response = api.patch(url, {"mail_language": "ja"}, content_type="application/json")
    assert response.json()["job_mail"] == "all" and response.json()["mail_language"] == "ja"
    alice.refresh_from_db()
    assert (alice.job_mail, alice.mail_language) == ("all", "ja")
    # A repeat has no second effect.
    assert api.patch(url, {"job_mail": "all"}, content_type="application/json").status_code == 200
    alice.refresh_from_db()
    assert alice.job_mail == "all"


@pytest.mark.parametrize("value", ["sometimes", 10**30, "\x00", None, [], {}, "xx"])
@pytest.mark.parametrize("field", ["job_mail", "mail_language"])
def test_patch_me_refuses_bad_values_in_the_error_shape(alice, client, field, value):
    response = api_client(client, alice).patch(
        reverse("api:me"), {field: value}, content_type="application/json"
    )
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]
    alice.refresh_from_db()
    assert (alice.job_mail, alice.mail_language) == ("failures", "")


def test_an_anonymous_caller_changes_nothing(alice, client):
    response = client.patch(
        reverse("api:me"), {"job_mail": "never"}, content_type="application/json"
    )
    assert response.status_code == 401
    alice.refresh_from_db()
    assert alice.job_mail == "failures"
