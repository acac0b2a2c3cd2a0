"""The typed environment readers refuse malformed values, naming the variable."""

import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from portal.env import database_from_url, env_bool, env_int, env_list, env_str, env_url
from tests.conftest import REPO


def test_it_reads_typed_values(monkeypatch):
    monkeypatch.setenv("PORTAL_T_INT", " 42 ")
    monkeypatch.setenv("PORTAL_T_BOOL", "Yes")
    monkeypatch.setenv("PORTAL_T_LIST", "a, b ,c")
    assert env_int("PORTAL_T_INT") == 42
    assert env_bool("PORTAL_T_BOOL") is True
    assert env_list("PORTAL_T_LIST") == ["a", "b", "c"]


def test_defaults_apply_only_when_unset_or_empty(monkeypatch):
    monkeypatch.setenv("PORTAL_T_EMPTY", "")
    monkeypatch.delenv("PORTAL_T_UNSET", raising=False)
    assert env_int("PORTAL_T_EMPTY", 7) == 7
    assert env_str("PORTAL_T_UNSET", "x") == "x"


@pytest.mark.parametrize(
    ("reader", "value", "expected"),
    [
        (lambda name: env_int(name), "ten", "is not a whole number"),
        (lambda name: env_int(name, minimum=1), "0", "the minimum is 1"),
        (lambda name: env_bool(name), "maybe", "is not a boolean"),
        (lambda name: env_list(name), "a,,b", "has an empty item"),
        (lambda name: env_url(name, schemes=("redis",)), "http://x:1/0", "redis://"),
        (lambda name: env_url(name, schemes=("redis",)), "redis://host:99999/0", "invalid port"),
    ],
)
def test_it_refuses_a_malformed_value_naming_the_variable(monkeypatch, reader, value, expected):
    monkeypatch.setenv("PORTAL_T_VALUE", value)
    with pytest.raises(ImproperlyConfigured) as error:
        reader("PORTAL_T_VALUE")
    assert "PORTAL_T_VALUE" in str(error.value)
    assert expected in str(error.value)


def test_a_required_variable_that_is_missing_is_named(monkeypatch):
    monkeypatch.delenv("PORTAL_T_REQUIRED", raising=False)
    with pytest.raises(ImproperlyConfigured, match="PORTAL_T_REQUIRED is not set"):
        env_str("PORTAL_T_REQUIRED")


def test_a_secret_can_come_from_a_file(monkeypatch, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    monkeypatch.setenv("PORTAL_T_SECRET", "ignored")
    monkeypatch.setenv("PORTAL_T_SECRET_FILE", str(secret))
    assert env_str("PORTAL_T_SECRET") == "s3cret"


def test_an_unreadable_secret_file_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("PORTAL_T_SECRET_FILE", str(tmp_path / "missing"))
    with pytest.raises(ImproperlyConfigured, match=r"PORTAL_T_SECRET_FILE=.*cannot read"):
        env_str("PORTAL_T_SECRET")


def test_a_database_url_without_a_name_is_refused():
    with pytest.raises(ImproperlyConfigured, match="names no database"):
        database_from_url("PORTAL_DATABASE_URL", "postgresql://u@h:5432/")


def test_a_database_password_is_not_echoed_in_errors(monkeypatch):
    monkeypatch.setenv("PORTAL_T_DB", "mysql://u:hunter2@h/db")
    with pytest.raises(ImproperlyConfigured) as error:
        env_url("PORTAL_T_DB", schemes=("postgresql",))
    assert "hunter2" not in str(error.value)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("PORTAL_DATABASE_URL", "mysql://root@127.0.0.1/portal"),
        ("PORTAL_BROKER_URL", "amqp://guest@127.0.0.1//"),
        ("PORTAL_TASK_TIME_LIMIT_S", "soon"),
        ("PORTAL_DEBUG", "perhaps"),
        ("PORTAL_ENV", "staging"),
        ("PORTAL_LOG_FORMAT", "xml"),
    ],
)
def test_the_portal_refuses_to_start_with_a_malformed_setting(variable, value):
    result = manage_check({**os.environ, variable: value})
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert variable in result.stderr


def test_production_needs_a_secret_key():
    env = {**os.environ, "PORTAL_ENV": "production"}
    env.pop("PORTAL_SECRET_KEY", None)
    result = manage_check(env)
    assert result.returncode != 0
    assert "PORTAL_SECRET_KEY" in result.stderr


def test_without_portal_env_the_portal_is_production():
    env = {k: v for k, v in os.environ.items() if k not in ("PORTAL_ENV", "PORTAL_SECRET_KEY")}
    result = manage_check(env)
    assert result.returncode != 0
    assert "PORTAL_SECRET_KEY (or PORTAL_SECRET_KEY_FILE) is required" in result.stderr


def test_production_refuses_the_public_development_key():
    env = {**os.environ, "PORTAL_ENV": "production", "PORTAL_SECRET_KEY": "dev-only-insecure-key"}
    result = manage_check(env)
    assert result.returncode != 0
    assert "public development key" in result.stderr


def test_production_reports_services_reached_without_a_password():
    env = {
        **os.environ,
        "PORTAL_ENV": "production",
        "PORTAL_SECRET_KEY": "x" * 50,
        "PORTAL_ALLOWED_HOSTS": "portal.example.org",
    }
    for name in ("PORTAL_DATABASE_PASSWORD", "PORTAL_REDIS_PASSWORD"):
        env.pop(name, None)
        env.pop(f"{name}_FILE", None)
    result = manage_check(env)
    assert result.returncode != 0
    assert "portal.E003" in result.stderr and "PostgreSQL is reached without a password" in (
        result.stderr
    )
    assert result.stderr.count("portal.E004") == 2  # broker and cache


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("PORTAL_ALLOWED_HOSTS", "localhost,portal.example.org"),
        ("PORTAL_ALLOWED_HOSTS", "0.0.0.0"),  # noqa: S104 - what is refused
        ("PORTAL_ALLOWED_HOSTS", "*"),
        ("PORTAL_HTTP_HOST", "0.0.0.0"),  # noqa: S104 - what is refused
        ("PORTAL_HTTP_HOST", "10.1.2.3"),
    ],
)
def test_dev_mode_refuses_to_serve_anything_but_loopback(variable, value):
    result = manage_check({**os.environ, "PORTAL_ENV": "dev", variable: value})
    assert result.returncode != 0
    assert variable in result.stderr and "not a loopback address" in result.stderr


def test_dev_mode_serves_loopback_names():
    env = {
        **os.environ,
        "PORTAL_ENV": "dev",
        "PORTAL_ALLOWED_HOSTS": "localhost,127.0.0.2,[::1],portal.localhost",
        "PORTAL_HTTP_HOST": "127.0.0.1",
    }
    result = manage_check(env)
    assert result.returncode == 0, result.stderr


def manage_check(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
