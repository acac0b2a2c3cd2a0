"""The web tier holds no run-as rights (DESIGN "Trust boundaries").

dev/portal runs the web server as a user of its own (``portal-web``, made by dev/stack):
not root, no sudo, no Slurm key, no one's files. What needs those rights — an estimate's
expected start (sbatch --test-only as the researcher) and a job's output (a file only its
owner may read) — a worker does while the request waits. Here the real web server runs
as that user against the test database and the session's worker: the composer's
estimate, the job page's output tail and /healthz work, while that user itself cannot
read alice's files, act as her, or read the keys."""

import grp
import os
import pwd
import socket
import subprocess
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db import connection
from django.test import Client

from accounts.models import LedgerEntry
from accounts.selectors import project_balance
from accounts.tokens import token_create
from jobs.models import Job
from jobs.states import JobState
from tests.api.conftest import make_job
from tests.conftest import REPO
from tests.factories import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]

WEB_USER = "portal-web"
STACK_DIR = Path(os.environ.get("PORTAL_STACK_DIR", "/var/lib/slurm-gpu-portal"))
SECRETS = STACK_DIR / "secrets"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def web(celery_worker):
    """The portal's web server as dev/portal starts it (as portal-web), on a port of its
    own, on the test database, handing tasks to the session's worker."""
    queue, _ = celery_worker
    port = free_port()
    db = connection.settings_dict
    env = {
        **os.environ,
        "PORTAL_HTTP_PORT": str(port),
        "PORTAL_DATABASE_URL": f"postgresql://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "PORTAL_TASK_QUEUE": queue,
    }
    portal = [str(REPO / "dev" / "portal")]
    started = subprocess.run([*portal, "start", "web"], env=env, capture_output=True, text=True)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        yield f"http://127.0.0.1:{port}", env
    finally:
        subprocess.run([*portal, "stop", "web"], env=env, capture_output=True)


def web_pids(env: dict) -> list[int]:
    pid_file = STACK_DIR / "portal" / f"portal-web-{env['PORTAL_HTTP_PORT']}.pid"
    master = int(pid_file.read_text())
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return [master, *map(int, children)]


def uid_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])  # the real uid; the others follow it
    raise AssertionError(f"no Uid line for {pid}")


def as_web_user(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["runuser", "-u", WEB_USER, "--", *command], capture_output=True, text=True, check=False
    )


def entry_gid(user: str) -> int:
    return pwd.getpwnam(user).pw_gid


def jwt_keys() -> list[Path]:
    """Each dev cluster's JWT key: portal-dev's, and portal-next's inside its root
    (dev/cluster-next) unless the stack runs without it."""
    keys = [STACK_DIR / "jwt_hs256.key"]
    if os.environ.get("PORTAL_CLUSTER_NEXT") != "off":
        keys.append(STACK_DIR / "next" / "root" / "var" / "lib" / "portal-next" / "jwt_hs256.key")
    return keys


def sudoers_naming(user: str) -> list[str]:
    """The sudoers files that mention ``user`` (none where sudo is not installed, as on
    the dev stack: then ``sudo -n`` fails for lack of sudo, and this says it would still
    grant nothing once installed)."""
    files = [Path("/etc/sudoers")]
    if Path("/etc/sudoers.d").is_dir():
        files += sorted(Path("/etc/sudoers.d").iterdir())
    return [str(f) for f in files if f.is_file() and user in f.read_text(errors="replace")]


def signed_in(base: str, user) -> httpx.Client:
    """A browser-like client with ``user``'s session, made by Django's own log-in."""
    client = Client()
    client.force_login(user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    return httpx.Client(base_url=base, cookies={settings.SESSION_COOKIE_NAME: cookie})


def api_of(base: str, user) -> httpx.Client:
    """An API client with a token of ``user``'s, against the web server at ``base``."""
    _, token = token_create(user=user, name="web-tier")
    return httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def one_gpu_job(project, working_directory) -> dict:
    """The body of a small job request: one GPU of the debug partition for 5 minutes."""
    return {
        "project": project.slug,
        "partition": "debug",
        "gpus_per_node": 1,
        "time_limit_minutes": 5,
        "working_directory": str(working_directory),
        "script": "echo hello\n",
    }


def test_the_web_server_runs_as_its_own_user_and_holds_no_run_as_rights(
    web, make_project, alice, dev_cluster, workdir
):
    base, env = web
    web_uid = pwd.getpwnam(WEB_USER).pw_uid
    assert web_uid != 0
    assert {uid_of(pid) for pid in web_pids(env)} == {web_uid}

    project = make_project(members={alice: "pi"}, gpu_hours=10)
    api = api_of(base, alice)

    # The composer's estimate: the cost from the database, the start from a worker.
    estimate = api.post("/api/v1/jobs/estimate/", json=one_gpu_job(project, workdir))
    assert estimate.status_code == 200, estimate.text
    assert estimate.json()["fits"] is True
    assert estimate.json()["expected_start"] is not None

    # A job's output: a file only alice may read, read by a worker for the page.
    job = make_job(
        owner=alice,
        project=project,
        slurm_job_id=4242,
        working_directory=str(workdir),
        output_path=f"{workdir}/slurm-%j.out",
        error_path=f"{workdir}/slurm-%j.out",
    )
    written = workdir / "slurm-4242.out"
    written.write_text("step 1\nstep 2\n")
    entry = pwd.getpwnam("alice")
    os.chown(written, entry.pw_uid, entry.pw_gid)
    written.chmod(0o600)
    assert api.get(f"/api/v1/jobs/{job.pk}/output/").json()["text"] == "step 1\nstep 2\n"
    page = signed_in(base, alice).get(f"/jobs/{job.pk}/output/")
    assert page.status_code == 200 and "step 2" in page.text

    # /healthz, anonymous: the verdict from the stored probes.
    assert httpx.get(f"{base}/healthz").status_code == 200

    # And the web tier's user itself can do none of what the worker did for it.
    assert as_web_user("cat", str(written)).returncode != 0
    assert as_web_user("ls", entry.pw_dir).returncode != 0
    assert as_web_user("runuser", "-u", "alice", "--", "true").returncode != 0
    assert as_web_user("sudo", "-n", "-u", "alice", "true").returncode != 0
    assert as_web_user("sudo", "-n", "true").returncode != 0
    assert sudoers_naming(WEB_USER) == []
    # In none of the groups that could read a key, a researcher's files or act as root.
    groups = {grp.getgrgid(gid).gr_name for gid in os.getgrouplist(WEB_USER, entry_gid(WEB_USER))}
    assert not groups & {"root", "sudo", "wheel", "admin", "adm", "shadow", "slurm", "munge"}
    assert not groups & {"alice", "bob", "charlie"}
    others = ("postgres", "ldap-admin", "ldap-user-alice", "oidc-user-alice.anders")
    for secret in (*jwt_keys(), Path("/etc/munge/munge.key"), *(SECRETS / n for n in others)):
        assert secret.is_file(), f"{secret} is not there to be refused"
        assert as_web_user("cat", str(secret)).returncode != 0, f"{secret} is readable"
    # What it needs, it reads: its database, Redis, directory and provider passwords.
    for needed in ("portal-db", "redis", "ldap-portal", "oidc-client"):
        assert as_web_user("cat", str(SECRETS / needed)).returncode == 0, f"{needed} unreadable"


def test_a_symbolic_link_the_web_tier_cannot_see_is_refused_by_the_worker_at_no_charge(
    web, make_project, alice, dev_cluster, workdir, tmp_path
):
    """The web tier, as its own user, cannot look inside alice's 0700 home, so its path
    check cannot see that a folder there is a symbolic link out of her folders: the
    worker checks again right before sbatch and refuses the job, its hold released."""
    base, _ = web
    project = make_project(members={alice: "pi"}, gpu_hours=10)
    api = api_of(base, alice)
    escape = workdir / "escape"
    escape.symlink_to(tmp_path)
    assert as_web_user("ls", str(workdir)).returncode != 0  # what the web tier cannot see

    created = api.post("/api/v1/jobs/", json=one_gpu_job(project, escape))
    assert created.status_code == 201, created.text
    job = Job.objects.get(pk=created.json()["id"])

    def ended() -> bool:
        job.refresh_from_db()
        return job.state == JobState.SUBMIT_FAILED

    wait_for(ended, what=f"the worker to refuse job {job.pk}")
    assert f"'{escape}' is outside your allowed folders" in job.submit_error
    assert "symbolic link" in job.submit_error
    assert job.slurm_job_id is None
    assert api.get(f"/api/v1/jobs/{job.pk}/").json()["state"] == "submit_failed"
    balance = project_balance(project)
    assert balance.held_gpu_seconds == 0 and balance.used_gpu_seconds == 0
    charges = LedgerEntry.objects.filter(allocation__project=project, kind=LedgerEntry.Kind.CHARGE)
    assert not charges.exists()
