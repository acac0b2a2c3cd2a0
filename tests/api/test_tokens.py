"""POST/GET tokens/ and DELETE tokens/{id}/: made from a session, shown once, revocable."""

import pytest
from django.test import Client

from accounts.models import PersonalAccessToken
from accounts.tokens import token_create
from tests.api.conftest import error_of

pytestmark = pytest.mark.django_db


def days_valid(token) -> int:
    return round((token.expires_at - token.created_at).total_seconds() / 86400)


@pytest.fixture
def browser(alice) -> Client:
    client = Client()
    client.force_login(alice)
    return client


def test_a_session_creates_a_token_shown_once_that_then_works(browser, alice, settings):
    response = browser.post(
        "/api/v1/tokens/", {"name": "laptop", "expires_in_days": 7}, content_type="application/json"
    )
    assert response.status_code == 201
    created = response.json()
    plain = created["token"]
    assert plain.startswith("sgp_") and created["prefix"] == plain[:12]
    token = PersonalAccessToken.objects.get(pk=created["id"])
    assert token.user == alice and token.name == "laptop"
    assert days_valid(token) == 7
    me = Client(headers={"Authorization": f"Bearer {plain}"}).get("/api/v1/me/")
    assert me.json()["username"] == "alice"
    # Listed afterwards without the secret.
    listed = browser.get("/api/v1/tokens/").json()
    assert [t["id"] for t in listed] == [token.pk]
    assert "token" not in listed[0] and plain not in str(listed)


def test_the_expiry_defaults_and_has_a_maximum(browser, settings):
    settings.API_TOKEN_MAX_DAYS = 90
    settings.API_TOKEN_DEFAULT_DAYS = 30
    created = browser.post("/api/v1/tokens/", {"name": "ci"}, content_type="application/json")
    token = PersonalAccessToken.objects.get(pk=created.json()["id"])
    assert days_valid(token) == 30
    too_long = browser.post(
        "/api/v1/tokens/", {"name": "ci", "expires_in_days": 91}, content_type="application/json"
    )
    assert too_long.status_code == 400
    assert "90 days" in error_of(too_long)["fields"]["expires_in_days"][0]
    nameless = browser.post("/api/v1/tokens/", {}, content_type="application/json")
    assert error_of(nameless)["fields"].keys() == {"name"}


def test_a_token_cannot_create_tokens(api, alice):
    response = api(alice).post("/api/v1/tokens/", {"name": "more"}, content_type="application/json")
    assert response.status_code == 403
    assert error_of(response)["code"] == "permission_denied"
    assert PersonalAccessToken.objects.filter(user=alice).count() == 1  # the caller's own


def test_anonymous_cannot_list_or_create_tokens(anonymous):
    assert anonymous.get("/api/v1/tokens/").status_code == 401
    response = anonymous.post("/api/v1/tokens/", {"name": "x"}, content_type="application/json")
    assert response.status_code == 401


def test_a_user_lists_only_their_own_tokens(api, alice, bob):
    token_create(user=bob, name="bob's")
    listed = api(alice).get("/api/v1/tokens/").json()
    assert [t["name"] for t in listed] == ["tests"]


def test_deleting_revokes_the_token_and_a_repeat_changes_nothing(api, alice):
    token, plain = token_create(user=alice, name="old laptop")
    client = api(alice)
    response = client.delete(f"/api/v1/tokens/{token.pk}/")
    assert response.status_code == 204
    token.refresh_from_db()
    revoked_at = token.revoked_at
    assert revoked_at is not None
    refused = Client(headers={"Authorization": f"Bearer {plain}"}).get("/api/v1/me/")
    assert refused.status_code == 401
    assert client.delete(f"/api/v1/tokens/{token.pk}/").status_code == 204
    token.refresh_from_db()
    assert token.revoked_at == revoked_at


def test_a_token_can_revoke_itself(alice):
    token, plain = token_create(user=alice, name="leaked")
    client = Client(headers={"Authorization": f"Bearer {plain}"})
    assert client.delete(f"/api/v1/tokens/{token.pk}/").status_code == 204
    assert client.get("/api/v1/me/").status_code == 401


def test_another_users_token_is_a_404_and_stays_alive(api, alice, bob):
    token, plain = token_create(user=bob, name="bob's")
    response = api(alice).delete(f"/api/v1/tokens/{token.pk}/")
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"
    token.refresh_from_db()
    assert token.revoked_at is None
    assert (
        Client(headers={"Authorization": f"Bearer {plain}"}).get("/api/v1/me/").status_code == 200
    )


def test_one_token_over_the_cap_is_a_409_saying_the_cap_and_what_to_do(browser, alice):
    for n in range(20):
        token_create(user=alice, name=f"script {n}")
    response = browser.post(
        "/api/v1/tokens/", {"name": "one more"}, content_type="application/json"
    )
    assert response.status_code == 409
    error = error_of(response)
    assert error["code"] == "too_many_tokens" and error["limit"] == 20
    assert "20 active access tokens" in error["message"] and "Revoke one" in error["message"]
    assert PersonalAccessToken.objects.filter(user=alice).count() == 20
    # Revoking one through the API frees its slot.
    oldest = PersonalAccessToken.objects.filter(user=alice).order_by("id").first()
    assert browser.delete(f"/api/v1/tokens/{oldest.pk}/").status_code == 204
    again = browser.post("/api/v1/tokens/", {"name": "one more"}, content_type="application/json")
    assert again.status_code == 201
