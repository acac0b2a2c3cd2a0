import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from accounts.models import User
from accounts.services import user_create


def test_the_custom_user_model_is_in_use():
    assert get_user_model() is User


@pytest.mark.django_db
def test_posix_usernames_are_unique():
    user_create(username="alice", password="pw-alice-1234", posix_username="alice")
    with pytest.raises(ValidationError, match="posix_username"):
        user_create(username="alice2", password="pw-alice-1234", posix_username="alice")


@pytest.mark.django_db
@pytest.mark.parametrize("bad", ["Alice", "al ice", "a;rm", "-x", "x" * 33, "al\nice"])
def test_a_posix_username_must_be_a_valid_unix_login(bad):
    with pytest.raises(ValidationError, match="POSIX user name"):
        user_create(username="someone", password="pw-some-1234", posix_username=bad)


@pytest.mark.django_db
def test_users_without_a_posix_username_can_coexist():
    user_create(username="manny", password="pw-manny-1234")
    user_create(username="mona", password="pw-mona-1234")
    assert User.objects.filter(posix_username=None).count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize("system", ["root", "nobody", "daemon", "bin"])
def test_a_posix_username_is_never_root_or_a_system_account(system):
    with pytest.raises(ValidationError, match="is a system account"):
        user_create(username="someone", password="pw-some-1234", posix_username=system)
    assert not User.objects.filter(username="someone").exists()


@pytest.mark.django_db
def test_a_login_unknown_on_the_web_host_is_left_to_the_worker():
    # The web host need not know every user; the worker refuses unknown ones.
    user = user_create(username="newcomer", password="pw-new-1234", posix_username="newcomer")
    assert user.posix_username == "newcomer"
