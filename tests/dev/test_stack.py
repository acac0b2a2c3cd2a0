"""dev/stack brings up a real Slurm cluster, idempotently."""

import base64
import hashlib
import hmac
import json
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slurm
STACK = str(REPO / "dev" / "stack")


def stack(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([STACK, *args], capture_output=True, text=True, check=False, timeout=300)


def pids() -> dict[str, str]:
    lines = stack("status").stdout.splitlines()
    return {line.split()[0]: line.split()[-1] for line in lines if " pid " in line}


def stack_env() -> dict[str, str]:
    return dict(line.split("=", 1) for line in stack("env").stdout.splitlines())


def mint_jwt(user: str, key: bytes, lifetime_s: int = 60) -> str:
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    now = int(time.time())
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = b64(json.dumps({"sun": user, "iat": now, "exp": now + lifetime_s}).encode())
    signature = hmac.new(key, f"{header}.{claims}".encode(), hashlib.sha256).digest()
    return f"{header}.{claims}.{b64(signature)}"


def rest_get(path: str, headers: dict[str, str]) -> int:
    url = stack_env()["SLURM_REST_URL"] + path
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10):
            return 200
    except urllib.error.HTTPError as error:
        return error.code


def test_a_second_start_changes_nothing(slurm_stack):
    before = pids()
    result = stack("start")
    assert result.returncode == 0, result.stderr
    assert pids() == before
    assert set(before) == {"munge", "slurmdbd", "slurmctld", "slurmd", "slurmrestd"}


def test_status_lists_every_component_up(slurm_stack):
    result = stack("status")
    assert result.returncode == 0
    for component in ("postgresql", "redis", "mariadb", "munge", "slurmdbd", "slurmctld",
                      "slurmd", "slurmrestd"):  # fmt: skip
        assert f"{component:<11} up" in result.stdout


def test_sinfo_lists_eight_h200_gpus_in_two_partitions(slurm_stack):
    result = subprocess.run(
        ["sinfo", "--noheader", "--format=%P|%l|%G|%T"], capture_output=True, text=True, check=True
    )
    rows = {line.split("|")[0]: line.split("|")[1:] for line in result.stdout.splitlines()}
    assert rows["gpu*"][:2] == ["7-00:00:00", "gpu:h200:8"]
    assert rows["debug"][:2] == ["1:00:00", "gpu:h200:8"]


def test_a_stopped_daemon_starts_again_and_others_keep_running(slurm_stack):
    before = pids()
    assert stack("stop", "slurmrestd").returncode == 0
    assert stack("status").returncode == 1
    assert stack("stop", "slurmrestd").stdout.strip().endswith("not running")
    assert stack("start", "slurmrestd").returncode == 0
    after = pids()
    assert after["slurmrestd"] != before["slurmrestd"]
    assert {k: v for k, v in after.items() if k != "slurmrestd"} == {
        k: v for k, v in before.items() if k != "slurmrestd"
    }


def test_it_refuses_to_stop_the_machines_services(slurm_stack):
    result = stack("stop", "postgresql")
    assert result.returncode != 0
    assert "the machine's" in result.stderr


def test_slurmrestd_takes_a_jwt_minted_from_the_cluster_key(slurm_stack):
    key_file = stack_env()["SLURM_JWT_KEY_FILE"]
    with open(key_file, "rb") as handle:
        token = mint_jwt("root", handle.read())
    headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": token}
    assert rest_get("/slurm/v0.0.38/diag", headers) == 200
    assert rest_get("/slurm/v0.0.38/diag", {}) == 401
    forged = mint_jwt("root", b"not-the-cluster-key")
    assert rest_get("/slurm/v0.0.38/diag", {**headers, "X-SLURM-USER-TOKEN": forged}) != 200
