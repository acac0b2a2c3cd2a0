"""dev/stack brings up a real single-node Slurm cluster, idempotently.

These tests use the live stack: they start it themselves (``dev/stack start``
changes nothing when it is already up) and need root, like the stack does.
"""

import base64
import contextlib
import hashlib
import hmac
import json
import pwd
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
STACK = str(REPO / "dev" / "stack")
COMPONENTS = ("postgresql", "redis", "mariadb", "munge", "slurmdbd", "slurmctld", "slurmd",
              "slurmrestd", "slapd", "oidc")  # fmt: skip
# The second cluster's daemons, as status names them (dev/cluster-next).
NEXT_COMPONENTS = tuple(
    f"portal-next:{name}" for name in ("munge", "slurmdbd", "slurmctld", "slurmd", "slurmrestd")
)
EVERY_COMPONENT = set(COMPONENTS) | set(NEXT_COMPONENTS)
POSIX_USER = "portal-stacktest"
SLURM_ACCOUNT = "portal-stacktest"
TIMEOUT_S = 60  # generous: other work may share the eight GPUs


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, check=False, timeout=timeout)


def stack(*args: str) -> subprocess.CompletedProcess:
    return run(STACK, *args)


def pids() -> dict[str, str]:
    """Each component that `dev/stack status` reports up, with its pid."""
    rows = (line.split() for line in stack("status").stdout.splitlines())
    return {row[0]: row[3] for row in rows if row[1:3] == ["up", "pid"]}


def wait_for(what: str, probe, done, timeout_s: float = TIMEOUT_S):
    """Poll probe() until done(its result); fail with what was last seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = probe()
        if done(seen):
            return seen
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout_s:.0f}s; last seen: {seen!r}", pytrace=False)
        time.sleep(0.25)


def mint_jwt(user: str, key: bytes, lifetime_s: int = 60) -> str:
    """An HS256 token as the portal makes them: claims sun, iat and exp."""

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    now = int(time.time())
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = b64(json.dumps({"sun": user, "iat": now, "exp": now + lifetime_s}).encode())
    signature = hmac.new(key, f"{header}.{claims}".encode(), hashlib.sha256).digest()
    return f"{header}.{claims}.{b64(signature)}"


def rest_status(env: dict[str, str], path: str, headers: dict[str, str]) -> int:
    request = urllib.request.Request(env["SLURM_REST_URL"] + path, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.fixture(scope="module", autouse=True)
def stack_env() -> dict[str, str]:
    started = stack("start")
    assert started.returncode == 0, f"dev/stack start failed:\n{started.stdout}{started.stderr}"
    return dict(line.split("=", 1) for line in stack("env").stdout.splitlines())


@pytest.fixture(scope="module")
def stack_user(stack_env) -> pwd.struct_passwd:
    """A POSIX user with a home and a Slurm association; made once, kept between runs."""
    try:
        pwd.getpwnam(POSIX_USER)
    except KeyError:
        run("useradd", "--create-home", "--shell", "/bin/sh", POSIX_USER).check_returncode()
    # Each is a no-op (exit 1, "Nothing new added") when already there; adding the
    # account again also restores its association with the cluster if that was lost.
    run("sacctmgr", "-i", "add", "account", SLURM_ACCOUNT, "cluster=portal-dev",
        "description=dev/stack tests", "organization=portal")  # fmt: skip
    run("sacctmgr", "-i", "add", "user", POSIX_USER, f"account={SLURM_ACCOUNT}")
    associations = run("sacctmgr", "-nP", "list", "association", f"user={POSIX_USER}",
                       f"account={SLURM_ACCOUNT}", "format=user").stdout  # fmt: skip
    assert POSIX_USER in associations.split(), f"no association of {POSIX_USER} in Slurm"
    return pwd.getpwnam(POSIX_USER)


def test_env_describes_the_dev_cluster(stack_env):
    assert stack_env["SLURM_CLUSTER_NAME"] == "portal-dev"
    assert stack_env["SLURM_REST_URL"] == "http://127.0.0.1:6820"
    assert Path(stack_env["SLURM_JWT_KEY_FILE"]).stat().st_size >= 32
    assert Path(stack_env["SLURM_JWT_KEY_FILE"]).parent == Path(stack_env["PORTAL_STACK_DIR"])


def test_status_lists_every_component_up():
    result = stack("status")
    assert result.returncode == 0, result.stdout
    assert set(pids()) == EVERY_COMPONENT, result.stdout


def test_a_second_start_leaves_every_daemon_as_it_was():
    before = pids()
    result = stack("start")
    assert result.returncode == 0, result.stderr
    assert pids() == before
    assert set(before) == EVERY_COMPONENT


def test_sinfo_lists_eight_h200_gpus_in_both_partitions():
    result = run("sinfo", "--noheader", "--format=%P|%l|%G")
    assert result.returncode == 0, result.stderr
    rows = {line.split("|")[0]: line.split("|")[1:] for line in result.stdout.splitlines()}
    assert rows == {"gpu*": ["7-00:00:00", "gpu:h200:8"], "debug": ["1:00:00", "gpu:h200:8"]}


def test_a_job_runs_as_its_user_and_is_accounted_with_its_gpu_and_comment(stack_user):
    comment = f"portal:{uuid.uuid4()}"
    output = Path(stack_user.pw_dir) / f"stacktest-{uuid.uuid4().hex[:8]}.out"
    submitted = run("runuser", "-u", POSIX_USER, "--", "sbatch", "--parsable",
                    f"--account={SLURM_ACCOUNT}", "--partition=gpu", "--gpus=1",
                    f"--comment={comment}", f"--chdir={stack_user.pw_dir}",
                    f"--output={output}", "--wrap", "id -un")  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().split(";")[0]

    def accounting() -> list[str]:
        result = run("sacct", "--noheader", "--allocations", "--parsable2", f"--jobs={job_id}",
                     "--format=State,User,AllocTRES,Comment")  # fmt: skip
        return result.stdout.strip().split("|")

    def ended(row: list[str]) -> bool:
        return row[0] not in ("", "PENDING", "RUNNING", "COMPLETING", "REQUEUED", "SUSPENDED")

    row = wait_for(f"job {job_id} to end and reach accounting", accounting, ended)
    state, user, alloc_tres, stored_comment = row
    assert state == "COMPLETED", row
    assert user == POSIX_USER
    assert "gres/gpu=1" in alloc_tres.split(",")
    assert stored_comment == comment
    assert output.read_text().strip() == POSIX_USER
    assert output.stat().st_uid == stack_user.pw_uid


@pytest.mark.parametrize("token_from", ["minted from the key file", "scontrol token"])
def test_slurmrestd_answers_a_request_with_a_jwt(stack_env, token_from):
    if token_from == "scontrol token":
        issued = run("scontrol", "token", "username=root", "lifespan=60")
        assert issued.returncode == 0, issued.stderr
        token = issued.stdout.strip().removeprefix("SLURM_JWT=")
    else:
        token = mint_jwt("root", Path(stack_env["SLURM_JWT_KEY_FILE"]).read_bytes())
    headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": token}
    assert rest_status(stack_env, "/slurm/v0.0.38/diag", headers) == 200
    assert rest_status(stack_env, "/slurm/v0.0.38/partitions", headers) == 200


def test_slurmrestd_refuses_a_request_without_a_valid_jwt(stack_env):
    forged = mint_jwt("root", b"not the cluster's key")
    assert rest_status(stack_env, "/slurm/v0.0.38/diag", {}) in (401, 403)
    forged_headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": forged}
    assert rest_status(stack_env, "/slurm/v0.0.38/diag", forged_headers) != 200


def test_it_refuses_to_stop_the_machines_services():
    result = stack("stop", "postgresql")
    assert result.returncode != 0
    assert "the machine's" in result.stderr
    assert "postgresql" in pids()


@pytest.mark.parametrize("component", ["slurmrestd", "slurmctld", "slapd"])
def test_a_stopped_daemon_starts_again_and_the_others_keep_running(component):
    before = pids()
    assert stack("stop", component).returncode == 0
    status = stack("status")
    assert status.returncode == 1
    assert component not in pids()
    assert stack("stop", component).stdout.strip() == f"{component:<11} not running"

    restarted = stack("start", component)
    assert restarted.returncode == 0, restarted.stderr
    after = pids()
    assert after.keys() == before.keys()
    assert after[component] != before[component]
    assert {k: v for k, v in after.items() if k != component} == {
        k: v for k, v in before.items() if k != component
    }


def test_slurmrestd_restarted_under_load_is_gone_with_its_port_when_stop_returns(stack_env):
    """Requests in flight while slurmrestd stops: stop returns only when no thread of it
    is left and its port is free, so a start straight after always binds the port."""
    url = stack_env["SLURM_REST_URL"] + "/openapi/v3"
    port = url.rsplit(":", 1)[1].split("/")[0]
    stop_hammering = threading.Event()

    def hammer():
        while not stop_hammering.is_set():
            # 401 without a token; refused while it is down.
            with contextlib.suppress(urllib.error.URLError, OSError):
                urllib.request.urlopen(url, timeout=2).read()

    threads = [threading.Thread(target=hammer, daemon=True) for _ in range(8)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(3):
            pid = pids()["slurmrestd"]  # this cluster's (portal-next runs one of its own)
            stopped = stack("stop", "slurmrestd")
            assert stopped.returncode == 0, stopped.stderr
            listening = run("ss", "-Hltn", f"sport = :{port}").stdout.strip()
            assert listening == "", f"port {port} still taken after stop: {listening}"
            # A dead daemon may linger as a zombie until it is reaped: one thread, state Z.
            left = run("ps", "-o", "nlwp=,stat=", "-p", pid).stdout.strip()
            assert left == "" or (left.split()[0] == "1" and "Z" in left.split()[1]), left
            started = stack("start", "slurmrestd")
            assert started.returncode == 0, started.stderr
    finally:
        stop_hammering.set()
        for thread in threads:
            thread.join(timeout=5)
        stack("start", "slurmrestd")


def test_the_provider_keeps_its_signing_key_and_the_directory_its_entries_across_restarts(
    stack_env,
):
    jwks_url = stack_env["PORTAL_OIDC_ISSUER"] + "/jwks"
    with urllib.request.urlopen(jwks_url, timeout=10) as response:
        before = json.load(response)
    assert stack("stop", "oidc", "slapd").returncode == 0
    started = stack("start", "slapd", "oidc")
    assert started.returncode == 0, started.stderr
    with urllib.request.urlopen(jwks_url, timeout=10) as response:
        assert json.load(response) == before
    alice = run("ldapsearch", "-x", "-LLL", "-H", stack_env["PORTAL_LDAP_URL"], "-D",
                f"cn=admin,{stack_env['PORTAL_LDAP_BASE_DN']}", "-y",
                f"{stack_env['PORTAL_STACK_DIR']}/secrets/ldap-admin", "-b",
                stack_env["PORTAL_LDAP_BASE_DN"], "(uid=alice)", "uidNumber")  # fmt: skip
    assert f"uidNumber: {pwd.getpwnam('alice').pw_uid}" in alice.stdout, alice.stderr
