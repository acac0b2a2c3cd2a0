"""The access tokens page: a new token is shown once, stored hashed, revocable by its owner."""

from accounts.models import PersonalAccessToken
from accounts.tokens import hash_token, token_create


def test_a_new_token_is_shown_once_and_only_its_hash_is_kept(client, alice):
    client.force_login(alice)
    response = client.post("/tokens/", {"name": "laptop", "expires_in_days": "30"})
    html = response.content.decode()
    token = PersonalAccessToken.objects.get(user=alice)
    start = html.index("data-token>") + len("data-token>")
    plain = html[start : html.index("<", start)]
    assert plain.startswith("sgp_") and token.token_hash == hash_token(plain)
    assert plain not in client.get("/tokens/").content.decode()  # never again
    assert token.prefix in client.get("/tokens/").content.decode()


def test_a_too_long_validity_is_refused_beside_the_field(client, alice, settings):
    settings.API_TOKEN_MAX_DAYS = 90
    client.force_login(alice)
    response = client.post("/tokens/", {"name": "forever", "expires_in_days": "1000"})
    assert response.status_code == 400
    assert 'id="error-expires_in_days"' in response.content.decode()
    assert not PersonalAccessToken.objects.exists()


def test_the_owner_revokes_a_token_and_others_get_a_404(client, alice, bob):
    client.force_login(alice)
    client.post("/tokens/", {"name": "ci", "expires_in_days": "7"})
    token = PersonalAccessToken.objects.get(user=alice)
    client.force_login(bob)
    assert client.post(f"/tokens/{token.pk}/revoke/").status_code == 404
    assert client.get(f"/tokens/{token.pk}/revoke/").status_code in (404, 405)
    client.force_login(alice)
    assert client.post(f"/tokens/{token.pk}/revoke/").status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_the_page_needs_a_login(client, db):
    assert client.get("/tokens/").status_code == 302


def test_one_token_over_the_cap_is_refused_on_the_page_with_what_to_do(client, alice, settings):
    settings.API_MAX_TOKENS_PER_USER = 20
    for n in range(20):
        token_create(user=alice, name=f"script {n}")
    client.force_login(alice)
    response = client.post("/tokens/", {"name": "one more", "expires_in_days": "7"})
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="error-__all__"' in html
    assert "You already have 20 active access tokens, the most allowed." in html
    assert "data-token>" not in html
    assert not PersonalAccessToken.objects.filter(name="one more").exists()
