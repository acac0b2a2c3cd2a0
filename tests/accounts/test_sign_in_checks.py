"""`manage.py check` says when the directory or the provider configured cannot work."""

import pytest
from django.core import checks
from django.core.cache import cache

from tests.portal.test_checks import manage


def check_ids() -> set[str]:
    return {message.id for message in checks.run_checks()}


@pytest.fixture(autouse=True)
def _no_cached_discovery():
    cache.clear()  # provider_metadata keeps the discovery document


def test_the_stacks_directory_and_provider_pass():
    assert not {i for i in check_ids() if i.startswith("accounts.")}


def test_a_directory_that_refuses_the_portals_bind_is_a_warning(settings):
    settings.LDAP_BIND_PASSWORD = "not-the-password"
    messages = [m for m in checks.run_checks() if m.id == "accounts.W001"]
    assert len(messages) == 1
    assert "refused the portal's bind as cn=portal,ou=services" in messages[0].msg


def test_a_provider_that_does_not_answer_or_names_another_issuer_is_a_warning(settings):
    settings.OIDC_ISSUER = "http://127.0.0.1:9"
    assert "accounts.W002" in check_ids()
    cache.clear()
    settings.OIDC_ISSUER = "http://localhost:9080"  # the same provider, another name
    [message] = [m for m in checks.run_checks() if m.id == "accounts.W002"]
    assert "names the issuer 'http://127.0.0.1:9080'" in message.msg


def test_production_refuses_a_clear_text_directory_and_a_missing_client_secret(settings):
    settings.IS_PRODUCTION = True
    settings.OIDC_RP_CLIENT_SECRET = ""
    assert {"accounts.E001", "accounts.E002"} <= check_ids()
    settings.LDAP_START_TLS = True  # (slapd here speaks no TLS: the bind then fails)
    assert "accounts.E001" not in check_ids()


def test_sources_switched_off_are_not_checked(settings):
    settings.LDAP_URL = ""
    settings.OIDC_ISSUER = ""
    settings.LDAP_BIND_PASSWORD = "wrong"
    assert not {i for i in check_ids() if i.startswith("accounts.")}


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("PORTAL_LDAP_URL", "http://directory", "is not a directory's address"),
        ("PORTAL_OIDC_ISSUER", "login.example.org", "is not a URL"),
        ("PORTAL_LOCAL_LOGIN", "off", "write on (everyone with a portal password)"),
        ("PORTAL_GROUP_PROJECTS", "vision-members=vision", "is not group=project:role"),
        ("PORTAL_GROUP_PROJECTS", "a=b:owner", "is not group=project:role"),
        ("PORTAL_OIDC_DIRECTORY_MATCH", "sub=uid", "write email=<attribute>"),
    ],
)
def test_a_sign_in_setting_that_cannot_work_stops_the_process_naming_it(variable, value, says):
    result = manage("check", **{variable: value})
    assert result.returncode != 0
    assert variable in result.stderr and says in result.stderr


def test_production_refuses_a_provider_over_plain_http():
    result = manage(
        "check",
        PORTAL_ENV="production",
        PORTAL_SECRET_KEY="x" * 50,
        PORTAL_OIDC_ISSUER="http://login.example.org",
    )
    assert result.returncode != 0
    assert "is plain HTTP" in result.stderr
