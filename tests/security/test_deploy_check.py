"""Production settings: `manage.py check --deploy` is clean, and the cookies, HSTS and
HTTPS redirect it asks for are what a production process really sends.

Each test starts a process of its own with PORTAL_ENV=production: the settings
module reads the environment once, when Django starts.
"""

import json
import os
import secrets
import subprocess
import sys

import pytest
from django.conf import settings
from django.contrib.auth.hashers import make_password
from django.db import connection

from accounts.services import user_create
from tests.conftest import REPO

HOST = "portal.example.org"


def production_env(**extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PORTAL_HSTS", "PORTAL_SECURE", "PORTAL_PROXY", "PORTAL_DEBUG"))
    }
    return {
        **env,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "PORTAL_ENV": "production",
        "PORTAL_SECRET_KEY": secrets.token_urlsafe(50),
        "PORTAL_ALLOWED_HOSTS": HOST,
        # Production takes no password from the dev stack's folder: it is given.
        "PORTAL_DATABASE_PASSWORD": settings.DATABASE_PASSWORD,
        "PORTAL_REDIS_PASSWORD": settings.REDIS_PASSWORD,
        **extra,
    }


def run(args: list[str], **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        args,
        cwd=REPO,
        env=production_env(**extra),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_check_deploy_is_clean_in_production():
    result = run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"])
    assert result.returncode == 0, result.stdout + result.stderr
    # Only HSTS preload is silenced (an operator's commitment, see portal/settings.py).
    assert "System check identified no issues (1 silenced)." in result.stdout
    assert "WARNING" not in result.stderr


def test_with_preload_chosen_nothing_is_silenced():
    result = run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        PORTAL_HSTS_PRELOAD="on",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout


def test_check_deploy_warns_about_what_production_turns_off():
    # The check is not vacuous: the same run without HSTS and redirect warns.
    result = run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        PORTAL_HSTS_SECONDS="0",
        PORTAL_SECURE_SSL_REDIRECT="off",
    )
    assert result.returncode != 0
    assert "security.W004" in result.stderr and "security.W008" in result.stderr


# Logs in through the test client inside a production process and reports what it sent.
PROBE = """
import json, django
django.setup()
from django.conf import settings
from django.test import Client
# No collectstatic in a test: the manifest storage production uses would need one.
settings.STORAGES = {**settings.STORAGES, "staticfiles": {
    "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
client = Client(HTTP_HOST="portal.example.org")
plain = client.get("/login/")
health = client.get("/healthz")
page = client.get("/login/", secure=True)
login = client.post(
    "/login/", {"username": "prod-alice", "password": "prod-alice-pass-1234"}, secure=True
)
cookies = {**page.cookies, **login.cookies}
print(json.dumps({
    "plain": [plain.status_code, plain.get("Location")],
    "health": health.status_code,
    "login": login.status_code,
    "hsts": page.get("Strict-Transport-Security"),
    "csp": page.get("Content-Security-Policy"),
    "cookies": {
        name: {flag: str(cookies[name][flag]) for flag in ("secure", "httponly", "samesite")}
        for name in ("sessionid", "csrftoken")
    },
}))
"""


@pytest.mark.django_db(transaction=True)
def test_production_sends_secure_cookies_hsts_and_redirects_to_https():
    user = user_create(username="prod-alice", password="prod-alice-pass-1234")
    # The production process knows the portal's own hasher only, not the tests' fast one.
    user.password = make_password("prod-alice-pass-1234", hasher="pbkdf2_sha256")
    user.save(update_fields=["password"])
    db = connection.settings_dict
    result = run(
        [sys.executable, "-c", PROBE],
        PORTAL_DATABASE_URL=f"postgresql://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["plain"] == [301, f"https://{HOST}/login/"]
    assert seen["health"] != 301  # load balancers probe over plain HTTP
    assert seen["login"] == 302
    assert seen["hsts"] == "max-age=31536000; includeSubDomains"
    assert "script-src 'self';" in seen["csp"]
    assert seen["cookies"]["sessionid"] == {"secure": "True", "httponly": "True", "samesite": "Lax"}
    # The CSRF cookie stays readable by scripts (Django's default); it is Secure and Lax.
    assert seen["cookies"]["csrftoken"]["secure"] == "True"
    assert seen["cookies"]["csrftoken"]["samesite"] == "Lax"


def test_a_tls_proxy_header_is_trusted_only_when_configured():
    probe = (
        "import django, json; django.setup(); from django.conf import settings; "
        "print(json.dumps(settings.SECURE_PROXY_SSL_HEADER))"
    )
    assert run([sys.executable, "-c", probe]).stdout.strip() == "null"
    configured = run([sys.executable, "-c", probe], PORTAL_PROXY_SSL_HEADER="X-Forwarded-Proto")
    assert json.loads(configured.stdout) == ["HTTP_X_FORWARDED_PROTO", "https"]
    other = run([sys.executable, "-c", probe], PORTAL_PROXY_SSL_HEADER="X-Forwarded-Ssl=on")
    assert json.loads(other.stdout) == ["HTTP_X_FORWARDED_SSL", "on"]
    bad = run([sys.executable, "-c", probe], PORTAL_PROXY_SSL_HEADER="X Forwarded")
    assert bad.returncode != 0
    assert "PORTAL_PROXY_SSL_HEADER" in bad.stderr
