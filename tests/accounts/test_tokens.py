"""token_create's cap: a user has at most API_MAX_TOKENS_PER_USER live access tokens."""

import datetime as dt
import threading

import pytest
from django.db import connection
from django.utils import timezone

from accounts.errors import TooManyTokens
from accounts.models import PersonalAccessToken
from accounts.tokens import active_tokens_of, token_create, token_revoke

pytestmark = pytest.mark.django_db


def fill(user, count: int) -> list[PersonalAccessToken]:
    return [token_create(user=user, name=f"script {n}")[0] for n in range(count)]


def test_the_twenty_first_token_is_refused_with_the_cap_and_what_to_do(alice):
    fill(alice, 20)
    with pytest.raises(TooManyTokens) as refusal:
        token_create(user=alice, name="one more")
    assert refusal.value.limit == 20
    assert "20 active access tokens" in str(refusal.value)
    assert "Revoke one" in str(refusal.value)
    assert PersonalAccessToken.objects.filter(user=alice).count() == 20


def test_the_cap_follows_the_setting_and_counts_per_user(settings, alice, bob):
    settings.API_MAX_TOKENS_PER_USER = 2
    fill(alice, 2)
    with pytest.raises(TooManyTokens):
        token_create(user=alice, name="third")
    assert token_create(user=bob, name="bob's first")[0].user == bob


def test_a_revoked_token_frees_a_slot(settings, alice):
    settings.API_MAX_TOKENS_PER_USER = 2
    first, second = fill(alice, 2)
    with pytest.raises(TooManyTokens):
        token_create(user=alice, name="third")
    token_revoke(token=first)
    token, _ = token_create(user=alice, name="third")
    assert set(active_tokens_of(alice)) == {second, token}


def test_an_expired_token_frees_a_slot(settings, alice):
    settings.API_MAX_TOKENS_PER_USER = 2
    first, second = fill(alice, 2)
    PersonalAccessToken.objects.filter(pk=first.pk).update(
        expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    token, _ = token_create(user=alice, name="third")
    assert set(active_tokens_of(alice)) == {second, token}


def test_concurrent_creations_do_not_pass_the_cap(transactional_db, settings, alice):
    settings.API_MAX_TOKENS_PER_USER = 3
    fill(alice, 1)
    created, refused, errors = [], [], []
    start = threading.Barrier(6)

    def create(n: int) -> None:
        try:
            start.wait()
            created.append(token_create(user=alice, name=f"race {n}")[0])
        except TooManyTokens:
            refused.append(n)
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=create, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(created) == 2 and len(refused) == 4
    assert active_tokens_of(alice).count() == 3
