"""Brute-force throttle of the web and admin log-in: per (user name, client address), per address.

Every test has user names and addresses of its own: the counts live in the shared
test Redis, where other test runs (and the other tests here) log in too.
"""

import threading
import time
import uuid

import pytest
from django.test import Client, RequestFactory

from accounts.login_throttle import client_address, login_failed, login_lockout
from accounts.models import User
from accounts.services import user_create

WRONG = "not-the-password"


@pytest.fixture(autouse=True)
def _limits(settings):
    settings.LOGIN_MAX_FAILURES = 5
    settings.LOGIN_MAX_FAILURES_PER_ADDRESS = 20
    settings.LOGIN_WINDOW_S = 900
    settings.PROXY_COUNT = 0
    # Many log-ins per test: a fast hasher (the throttle never looks at hashes).
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def new_address() -> str:
    # A /64 of its own in the documentation prefix (IPv6 is counted per /64).
    return f"2001:db8:{uuid.uuid4().hex[:4]}:{uuid.uuid4().hex[:4]}::1"


def new_user(*, staff: bool = False) -> User:
    name = f"thr-{uuid.uuid4().hex[:10]}"
    return user_create(username=name, password=f"{name}-pass-1234", is_staff=staff)


def password_of(user: User) -> str:
    return f"{user.username}-pass-1234"


def client_at(address: str) -> Client:
    return Client(REMOTE_ADDR=address)


def attempt(client: Client, user_or_name, password: str, *, url: str = "/login/", **extra):
    username = getattr(user_or_name, "username", user_or_name)
    return client.post(url, {"username": username, "password": password}, **extra)


def assert_refused(response, client: Client) -> None:
    assert response.status_code == 429
    assert 0 < int(response["Retry-After"]) <= 900
    html = response.content.decode()
    assert "Too many failed attempts to log in. Try again in 15 minutes (at " in html
    assert 'name="password"' in html  # the same form, to try again later
    assert "_auth_user_id" not in client.session


def test_five_failures_lock_the_user_name_at_that_address_even_with_the_right_password(db):
    user, client = new_user(), client_at(new_address())
    for _ in range(5):
        response = attempt(client, user, WRONG)
        assert response.status_code == 200
        assert b"Please enter a correct username and password" in response.content
    refused = attempt(client, user, password_of(user))
    assert_refused(refused, client)
    assert b"Please enter a correct username and password" not in refused.content
    assert_refused(attempt(client, user, password_of(user)), client)  # it stays locked


def test_a_guesser_at_one_address_cannot_lock_the_user_out_from_another(db):
    user, guesser = new_user(), client_at(new_address())
    for _ in range(5):
        attempt(guesser, user, WRONG)
    assert_refused(attempt(guesser, user, password_of(user)), guesser)
    # The name is compared as a person types it: case and spacing make no new count.
    assert_refused(attempt(guesser, f" {user.username.upper()}", password_of(user)), guesser)
    owner = client_at(new_address())
    response = attempt(owner, user, password_of(user))
    assert response.status_code == 302
    assert owner.session["_auth_user_id"] == str(user.pk)
    # The owner's success elsewhere lifts nothing at the guesser's address.
    assert_refused(attempt(guesser, user, password_of(user)), guesser)


def test_failures_for_one_name_from_many_addresses_do_not_add_up(db):
    user = new_user()
    addresses = [new_address() for _ in range(3)]
    for address in addresses:
        for _ in range(4):
            assert attempt(client_at(address), user, WRONG).status_code == 200
    for address in addresses:
        assert login_lockout(username=user.username, address=address) is None


def test_a_success_clears_the_user_names_count(db):
    user, client = new_user(), client_at(new_address())
    for _ in range(4):
        attempt(client, user, WRONG)
    assert attempt(client, user, password_of(user)).status_code == 302
    client.post("/logout/")
    for _ in range(4):
        assert attempt(client, user, WRONG).status_code == 200
    response = attempt(client, user, password_of(user))
    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(user.pk)


def test_one_address_is_locked_after_failures_for_many_user_names(db, settings):
    settings.LOGIN_MAX_FAILURES_PER_ADDRESS = 3
    address = new_address()
    for _ in range(3):
        attempt(client_at(address), f"nobody-{uuid.uuid4().hex[:8]}", WRONG)
    user = new_user()
    here = client_at(address)
    assert_refused(attempt(here, user, password_of(user)), here)
    # Its user name was never tried: from elsewhere it logs in.
    elsewhere = client_at(new_address())
    assert attempt(elsewhere, user, password_of(user)).status_code == 302


def test_a_success_does_not_clear_the_address_count(db, settings):
    settings.LOGIN_MAX_FAILURES_PER_ADDRESS = 3
    address = new_address()
    mine = new_user()
    attempt(client_at(address), "victim-a", WRONG)
    attempt(client_at(address), "victim-b", WRONG)
    assert attempt(client_at(address), mine, password_of(mine)).status_code == 302
    attempt(client_at(address), "victim-c", WRONG)
    again = client_at(address)
    assert_refused(attempt(again, mine, password_of(mine)), again)


def test_the_admin_login_is_throttled_and_shares_the_counts(db):
    manager = new_user(staff=True)
    client = client_at(new_address())
    for _ in range(3):
        assert attempt(client, manager, WRONG, url="/admin/login/").status_code == 200
    for _ in range(2):
        assert attempt(client, manager, WRONG).status_code == 200  # the portal's page
    refused = attempt(client, manager, password_of(manager), url="/admin/login/")
    assert refused.status_code == 429
    assert "admin/login.html" in [template.name for template in refused.templates]
    assert b"Too many failed attempts to log in." in refused.content
    assert "_auth_user_id" not in client.session


def test_the_refusal_is_in_the_users_language(db):
    user, client = new_user(), client_at(new_address())
    for _ in range(5):
        attempt(client, user, WRONG)
    refused = attempt(client, user, password_of(user), HTTP_ACCEPT_LANGUAGE="ja")
    assert refused.status_code == 429
    html = refused.content.decode()
    assert "ログインの失敗が多すぎます。15分後" in html
    assert "Too many failed attempts" not in html


def test_the_lock_ends_with_its_window(db, settings):
    settings.LOGIN_WINDOW_S = 1
    settings.LOGIN_MAX_FAILURES = 2
    user, client = new_user(), client_at(new_address())
    attempt(client, user, WRONG)
    attempt(client, user, WRONG)
    assert attempt(client, user, password_of(user)).status_code == 429
    time.sleep(1.5)
    assert attempt(client, user, password_of(user)).status_code == 302


def test_concurrent_failures_are_all_counted(db):
    # Atomic increments: five failures at once are five, and they lock the name.
    username, address = f"race-{uuid.uuid4().hex[:8]}", new_address()
    barrier = threading.Barrier(5)

    def fail() -> None:
        barrier.wait()
        login_failed(username=username, address=address)

    threads = [threading.Thread(target=fail) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert login_lockout(username=username, address=address) is not None
    # The lock is the name's at that address only.
    assert login_lockout(username=username, address=new_address()) is None


def test_without_the_cache_log_in_still_works_and_says_so(db, settings, caplog):
    # Fail open: a Redis restart must not lock everyone out; passwords are still checked.
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }
    user, client = new_user(), client_at(new_address())
    assert attempt(client, user, WRONG).status_code == 200
    assert attempt(client, user, password_of(user)).status_code == 302
    assert "log-in throttle off: the cache does not answer" in caplog.text


def test_a_client_cannot_choose_its_address_with_x_forwarded_for(settings):
    request = RequestFactory().post(
        "/login/", REMOTE_ADDR="192.0.2.7", HTTP_X_FORWARDED_FOR="198.51.100.1"
    )
    assert client_address(request) == "192.0.2.7"
    settings.PROXY_COUNT = 1  # one proxy: the address it saw is the last one it appended
    request = RequestFactory().post(
        "/login/", REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="198.51.100.1, 192.0.2.9"
    )
    assert client_address(request) == "192.0.2.9"


def test_ipv6_clients_are_counted_per_64():
    one = RequestFactory().post("/login/", REMOTE_ADDR="2001:db8:1:2::5")
    two = RequestFactory().post("/login/", REMOTE_ADDR="2001:db8:1:2:ffff::9")
    assert client_address(one) == client_address(two) == "2001:db8:1:2::/64"
