"""Who may call: bearer tokens (expired, revoked, unknown), sessions with CSRF, rate limits,
and the one error shape for 401, 404, 405 and 429 (and 500s left alone)."""

import datetime as dt

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from accounts.models import PersonalAccessToken
from accounts.tokens import token_create
from clusters.slurm.errors import SlurmUnavailable
from portal.api_errors import api_exception_handler
from tests.api.conftest import error_of

pytestmark = pytest.mark.django_db


def test_a_valid_token_authenticates_its_user(api, alice):
    assert api(alice).get("/api/v1/me/").json()["username"] == "alice"


@pytest.mark.parametrize(
    ("header", "says"),
    [
        ("Bearer sgp_" + "x" * 43, "not known"),
        ("Bearer nope", "not a portal access token"),
        ("Bearer", "Authorization: Bearer <token>"),
        ("Bearer a b", "Authorization: Bearer <token>"),
    ],
)
def test_a_bad_token_is_refused_with_401(header, says):
    response = Client(headers={"Authorization": header}).get("/api/v1/me/")
    assert response.status_code == 401
    error = error_of(response)
    assert error["code"] == "authentication_failed"
    assert says in error["message"]
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


def test_an_expired_token_is_refused_with_401(expired_token):
    response = expired_token.get("/api/v1/me/")
    assert response.status_code == 401
    assert "expired" in error_of(response)["message"]


def test_a_revoked_token_is_refused_with_401(revoked_token):
    response = revoked_token.get("/api/v1/me/")
    assert response.status_code == 401
    assert "revoked" in error_of(response)["message"]


def test_a_token_of_a_disabled_user_is_refused(api, alice):
    client = api(alice)
    alice.is_active = False
    alice.save()
    response = client.get("/api/v1/me/")
    assert response.status_code == 401
    assert "disabled" in error_of(response)["message"]


def test_a_bad_token_is_refused_even_with_a_good_session(alice):
    # A script with a dead token must hear so, not run as whoever is logged in.
    client = Client(headers={"Authorization": "Bearer sgp_" + "y" * 43})
    client.force_login(alice)
    assert client.get("/api/v1/me/").status_code == 401


def test_the_token_is_kept_only_as_a_hash(alice):
    token, plain = token_create(user=alice, name="laptop")
    token.refresh_from_db()
    assert plain.startswith("sgp_") and len(plain) == 47
    assert plain not in {token.token_hash, token.prefix, token.name}
    assert plain.startswith(token.prefix)
    stored = PersonalAccessToken.objects.filter(pk=token.pk).values()[0]
    assert all(plain not in str(value) for value in stored.values())


def test_last_used_is_written_at_most_once_a_minute(alice, django_assert_num_queries):
    token, plain = token_create(user=alice, name="cron")
    client = Client(headers={"Authorization": f"Bearer {plain}"})
    client.get("/api/v1/tokens/")
    token.refresh_from_db()
    first = token.last_used_at
    assert first is not None
    client.get("/api/v1/tokens/")
    token.refresh_from_db()
    assert token.last_used_at == first  # within the minute: not written again
    PersonalAccessToken.objects.filter(pk=token.pk).update(
        last_used_at=timezone.now() - dt.timedelta(minutes=2)
    )
    client.get("/api/v1/tokens/")
    token.refresh_from_db()
    assert token.last_used_at > first


def test_a_session_works_and_keeps_its_csrf_check(alice):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    assert browser.get("/api/v1/me/").status_code == 200
    response = browser.post("/api/v1/tokens/", {"name": "x"}, content_type="application/json")
    assert response.status_code == 403
    assert "CSRF" in error_of(response)["message"]


def test_a_token_needs_no_csrf_token(api, alice):
    client = api(alice)
    client.handler.enforce_csrf_checks = True
    response = client.post(
        "/api/v1/templates/", {"name": "t", "script": "true\n"}, content_type="application/json"
    )
    assert response.status_code == 201


def test_an_unknown_address_is_a_404_in_the_error_shape(api, alice, anonymous):
    for client in (api(alice), anonymous):
        response = client.get("/api/v1/nothing-here/")
        assert response.status_code == 404
        assert error_of(response)["code"] == "not_found"
    response = anonymous.get("/api/v1/me")
    assert "end with a slash" in error_of(response)["message"]
    # A POST too: no CSRF page, the same 404.
    strict = Client(enforce_csrf_checks=True)
    response = strict.post("/api/v1/jobs/abc/cancel/")
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


def test_a_method_the_endpoint_has_not_is_a_405(api, alice):
    response = api(alice).delete("/api/v1/me/")
    assert response.status_code == 405
    assert error_of(response)["code"] == "method_not_allowed"


def test_a_body_that_is_not_json_is_a_400(api, alice):
    response = api(alice).post("/api/v1/templates/", "{nope", content_type="application/json")
    assert response.status_code == 400
    assert error_of(response)["code"] == "parse_error"


def bearer(plain: str) -> Client:
    return Client(headers={"Authorization": f"Bearer {plain}"})


def fresh_budget(*users) -> None:
    cache.delete_many([f"throttle:api:user:{user.pk}" for user in users])


def test_too_many_requests_are_a_429_and_a_users_second_token_shares_the_budget(settings, alice):
    settings.API_RATE = "3/min"
    (_, cron_plain), (_, laptop_plain) = (
        token_create(user=alice, name=name) for name in ("cron", "laptop")
    )
    fresh_budget(alice)
    cron = bearer(cron_plain)
    statuses = [cron.get("/api/v1/me/").status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    response = cron.get("/api/v1/me/")
    assert error_of(response)["code"] == "throttled"
    assert int(response["Retry-After"]) > 0
    # A new token is no new budget: the limit is alice's, however she calls.
    refused = bearer(laptop_plain).get("/api/v1/me/")
    assert refused.status_code == 429
    assert error_of(refused)["code"] == "throttled"
    fresh_budget(alice)


def test_a_browser_session_and_a_token_share_the_budget(settings, alice):
    settings.API_RATE = "3/min"
    _, plain = token_create(user=alice, name="cron")
    fresh_budget(alice)
    browser = Client()
    browser.force_login(alice)
    assert [browser.get("/api/v1/me/").status_code for _ in range(2)] == [200, 200]
    script = bearer(plain)
    assert [script.get("/api/v1/me/").status_code for _ in range(2)] == [200, 429]
    assert browser.get("/api/v1/me/").status_code == 429
    fresh_budget(alice)


def test_another_user_has_a_budget_of_their_own(settings, alice, bob):
    settings.API_RATE = "2/min"
    alices, bobs = (bearer(token_create(user=user, name="cron")[1]) for user in (alice, bob))
    fresh_budget(alice, bob)
    assert [alices.get("/api/v1/me/").status_code for _ in range(3)] == [200, 200, 429]
    assert [bobs.get("/api/v1/me/").status_code for _ in range(3)] == [200, 200, 429]
    fresh_budget(alice, bob)


def test_requests_without_credentials_have_their_own_limit(settings, anonymous):
    # Only the schema and docs answer them (the rest says 401 before counting).
    settings.API_ANON_RATE = "2/min"
    cache.delete("throttle:api:address:127.0.0.1")
    statuses = [anonymous.get("/api/schema/").status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    cache.delete("throttle:api:address:127.0.0.1")


def test_a_users_calls_do_not_spend_the_anonymous_budget_of_their_address(
    settings, anonymous, alice
):
    settings.API_RATE = "5/min"
    settings.API_ANON_RATE = "2/min"
    _, plain = token_create(user=alice, name="cron")
    fresh_budget(alice)
    cache.delete("throttle:api:address:127.0.0.1")
    assert [bearer(plain).get("/api/v1/me/").status_code for _ in range(3)] == [200] * 3
    statuses = [anonymous.get("/api/schema/").status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    cache.delete("throttle:api:address:127.0.0.1")
    fresh_budget(alice)


def test_slurm_unreachable_is_a_503_and_a_bug_stays_a_500():
    response = api_exception_handler(SlurmUnavailable("connect failure"), {})
    assert response is not None and response.status_code == 503
    assert response.data["error"]["code"] == "slurm_unavailable"
    assert api_exception_handler(RuntimeError("a bug"), {}) is None


def test_with_the_cache_down_the_api_answers_without_limits(settings, api, alice):
    settings.API_RATE = "1/min"
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:9/0",  # nothing listens: refused at once
        }
    }
    client = api(alice)
    assert [client.get("/api/v1/me/").status_code for _ in range(3)] == [200, 200, 200]
