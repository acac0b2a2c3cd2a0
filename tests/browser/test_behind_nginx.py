"""The portal as deploy/ runs it: nginx with TLS in front of gunicorn, started with the web
unit's own ExecStart, WorkingDirectory, User and EnvironmentFile (the template, filled in
for the test database and Redis). Through it, HTTPS only: HSTS, secure cookies, plain
HTTP sent to HTTPS, static files from nginx, a log-in, and a job that reaches Slurm."""

import grp
import os
import pwd
import re
import secrets
import shutil
import ssl
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from django.contrib.auth.hashers import make_password
from django.db import connection
from playwright.sync_api import expect

from accounts.models import User
from jobs.models import Job
from portal.security import PORTAL_CSP
from tests.browser.conftest import TIMEOUT_MS, log_in
from tests.conftest import REPO
from tests.deploy.installed import (
    environment_file,
    environment_file_with,
    exec_start,
    free_port,
    installed_site,
    installed_unit,
    nginx_command,
    nginx_main_config,
    running,
    self_signed_certificate,
    unit_settings,
    wait_for_port,
)
from tests.factories import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]

SECRETS = Path(os.environ.get("PORTAL_STACK_DIR", "/var/lib/slurm-gpu-portal")) / "secrets"
HSTS = "max-age=31536000; includeSubDomains"  # production's default (portal/settings.py)
# The console's and the API docs' vendored assets take collectstatic half a minute to
# compress; the pages here use none of them.
NOT_COLLECTED = ("admin", "rest_framework", "drf_spectacular_sidecar")


@dataclass
class Served:
    url: str  # https://localhost:<port>
    http_url: str  # the same site over plain HTTP
    cert: Path  # the site's certificate, its own issuer
    access_log: Path


def secret_file(path: Path, *, group: str) -> Path:
    path.write_text(secrets.token_urlsafe(40))
    os.chown(path, 0, grp.getgrnam(group).gr_gid)
    path.chmod(0o640)
    return path


def as_unit_user(user: str) -> dict:
    """Popen's arguments that start a process as systemd starts a unit's User=."""
    entry = pwd.getpwnam(user)
    return {
        "user": entry.pw_uid,
        "group": entry.pw_gid,
        "extra_groups": os.getgrouplist(user, entry.pw_gid),
    }


@pytest.fixture
def behind_nginx(celery_worker) -> Iterator[Served]:
    queue, _ = celery_worker
    # Read by the web unit's user and nginx's workers (www-data) alike.
    folder = Path(tempfile.mkdtemp(prefix="portal-nginx-"))
    folder.chmod(0o755)
    try:
        yield from serve(folder, queue)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def serve(folder: Path, queue: str) -> Iterator[Served]:
    web_port, http_port, https_port = free_port(), free_port(), free_port()
    origin = f"https://localhost:{https_port}"
    db = connection.settings_dict
    unit = installed_unit("web", env_file=folder / "portal.env")
    user = unit_settings(unit)["User"][0]
    env_file = folder / "portal.env"
    env_file.write_text(
        environment_file_with(
            {
                "PORTAL_SECRET_KEY_FILE": str(secret_file(folder / "secret-key", group=user)),
                "PORTAL_HEALTH_TOKEN_FILE": str(secret_file(folder / "health-token", group=user)),
                "PORTAL_ALLOWED_HOSTS": "localhost",
                "PORTAL_CSRF_TRUSTED_ORIGINS": origin,
                "PORTAL_BASE_URL": origin,
                "PORTAL_WEB_BIND": f"127.0.0.1:{web_port}",
                "PORTAL_WEB_WORKERS": "2",
                "PORTAL_STATIC_ROOT": str(folder / "static"),
                "PORTAL_DATABASE_URL": (
                    f"postgresql://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
                ),
                "PORTAL_DATABASE_PASSWORD_FILE": str(SECRETS / "portal-db"),
                "PORTAL_BROKER_URL": os.environ["PORTAL_BROKER_URL"],
                "PORTAL_CACHE_URL": os.environ["PORTAL_CACHE_URL"],
                "PORTAL_REDIS_PASSWORD_FILE": str(SECRETS / "redis"),
            },
            # The session's worker takes the tasks from a queue of its own.
            extra={"PORTAL_TASK_QUEUE": queue},
        )
    )
    # What systemd gives a unit's processes, and the variables of its EnvironmentFile.
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin", "LANG": "C.UTF-8"}
    env |= environment_file(env_file.read_text())

    # As the README has the operator do it, with the same environment file.
    collected = subprocess.run(
        [str(REPO / "deploy" / "portal-manage"), "--env-file", str(env_file), "--as", "root",
         "collectstatic", "--noinput", "--verbosity", "0",
         *(f"--ignore={name}" for name in NOT_COLLECTED)],
        env={"PATH": env["PATH"], "PORTAL_VENV": sys.prefix},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert collected.returncode == 0, collected.stderr
    # The checkout and its Python may sit under folders closed to others (/root).
    reach = [str(REPO), f"{sys.base_prefix}/bin", sys.prefix]
    subprocess.run([str(REPO / "dev" / "portal"), "web-reach", *reach], check=True)

    cert, key = self_signed_certificate(folder)
    site = installed_site(
        cert=cert,
        key=key,
        static_root=folder / "static",
        upstream=f"127.0.0.1:{web_port}",
        http_port=http_port,
        https_port=https_port,
    )
    main = nginx_main_config(folder, site)
    gunicorn = exec_start(unit)
    with (
        running(
            gunicorn,
            log=folder / "gunicorn.log",
            cwd=unit_settings(unit)["WorkingDirectory"][0],
            env=env,
            **as_unit_user(user),
        ) as web,
        running(nginx_command(main, "-g", "daemon off;"), log=folder / "nginx.log") as nginx,
    ):
        wait_for_port(web_port, process=web, log=folder / "gunicorn.log")
        wait_for_port(https_port, process=nginx, log=folder / "nginx.log")
        yield Served(
            url=origin,
            http_url=f"http://localhost:{http_port}",
            cert=cert,
            access_log=folder / "access.log",
        )


def test_the_portal_behind_nginx_with_tls(behind_nginx, browser, make_project, alice, workdir):
    served = behind_nginx
    project = make_project(members={alice: "pi"}, gpu_hours=10)
    # The web server keeps the portal's own password hashers (the tests' are faster).
    User.objects.filter(pk=alice.pk).update(
        password=make_password("alice-pass-1234", hasher="pbkdf2_sha256")
    )

    # Plain HTTP is sent to HTTPS, the path and query kept.
    plain = httpx.get(f"{served.http_url}/login/?next=/jobs/")
    assert plain.status_code == 301
    assert plain.headers["location"] == "https://localhost/login/?next=/jobs/"

    # HTTPS with the site's certificate: HSTS, and the CSRF cookie is Secure.
    tls = httpx.Client(base_url=served.url, verify=ssl.create_default_context(cafile=served.cert))
    login = tls.get("/login/", headers={"X-Request-ID": "chosen-by-the-client"})
    assert login.status_code == 200
    # nginx's own request id replaced the client's, and the portal logged under it.
    assert re.fullmatch(r"[0-9a-f]{32}", login.headers["x-request-id"])
    assert login.headers["strict-transport-security"] == HSTS
    assert "secure" in login.headers["set-cookie"].lower()

    # A static file comes from nginx itself (no upstream in its log line), with the
    # portal's own headers.
    linked = re.search(r'href="(/static/[^"]+\.css)"', login.text)
    assert linked, login.text
    stylesheet = linked[1]
    static = tls.get(stylesheet)
    assert static.status_code == 200 and "text/css" in static.headers["content-type"]
    assert static.headers["strict-transport-security"] == HSTS
    assert static.headers["content-security-policy"] == PORTAL_CSP
    assert "immutable" in static.headers["cache-control"]
    # nginx writes a request's log line after its response is sent: wait for it.
    wait_for(
        lambda: f"{stylesheet} 200 upstream=-" in served.access_log.read_text().splitlines(),
        timeout_s=10, interval_s=0.1, what=f"nginx to log {stylesheet} served by itself",
    )  # fmt: skip
    logged = served.access_log.read_text().splitlines()
    assert any(re.fullmatch(r"/login/ 200 upstream=127\.0\.0\.1:\d+", line) for line in logged)

    # A researcher logs in and submits a job: the session and CSRF cookies are Secure,
    # and the form's POSTs pass Django's origin check behind the proxy.
    context = browser.new_context(
        base_url=served.url, ignore_https_errors=True, viewport={"width": 1280, "height": 900}
    )
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    log_in(page, "alice")
    cookies = {cookie["name"]: cookie for cookie in context.cookies()}
    assert cookies["sessionid"]["secure"] and cookies["sessionid"]["httpOnly"]
    assert cookies["csrftoken"]["secure"]

    page.goto("/jobs/new/")
    page.get_by_label("Job name").fill("behind-nginx")
    page.get_by_label("Partition").select_option("debug")
    page.get_by_label("Time limit (minutes)").fill("2")
    page.get_by_label("CPUs per GPU").fill("1")
    page.get_by_label("Memory per GPU (GB)").fill("1")
    page.get_by_label("Working directory").fill(str(workdir))
    page.get_by_label("Script", exact=True).fill("echo served through nginx\n")
    with page.expect_navigation():
        page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(pk=int(page.url.rstrip("/").rsplit("/", 1)[1]))
    assert job.project == project and job.owner == alice

    def submitted() -> int | None:
        job.refresh_from_db()
        return job.slurm_job_id

    wait_for(submitted, what=f"the worker to submit job {job.pk} to Slurm")
    context.close()
