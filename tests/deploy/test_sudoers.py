"""deploy/sudoers/slurm-gpu-portal, checked by sudo itself.

Each check runs in a mount namespace of its own where the drop-in is the whole of
/etc/sudoers.d, so the machine's sudo never sees it. The commands checked are the ones
the cli backend really runs with the production prefix (``sudo -n -u {user}``): every
one it runs as a job's owner must be allowed as a researcher, and nothing else: no
other tool, no other arguments, no root, system account or administrator."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from clusters.slurm import cli
from clusters.slurm.cli import CliClient, slurm_environment
from clusters.slurm.parsing import parse_test_only
from clusters.slurm.types import SubmitRequest
from tests.deploy.installed import ENV_TEMPLATE, SUDOERS, environment_file
from tests.slurm_accounts import DEV_CLUSTER

WORKER_USER = "portal-worker"  # deploy/systemd/slurm-gpu-portal-worker.service's User=
PRODUCTION_PREFIX = environment_file(ENV_TEMPLATE.read_text())["PORTAL_SLURM_RUN_AS_PREFIX"]
NO_SUCH_JOB = 99_999_999
ESTIMATE = "sbatch: Job 4243 to start at 2030-01-01T00:00:00 using 1 processors on nodes vm"


@pytest.fixture(scope="module")
def drop_in(tmp_path_factory) -> Path:
    """A folder holding the drop-in alone, as /etc/sudoers.d would (mode 0440, root's)."""
    if not shutil.which("sudo") or not shutil.which("visudo"):
        pytest.fail("sudo is missing; `dev/stack install` installs it", pytrace=False)
    folder = tmp_path_factory.mktemp("sudoers.d")
    folder.chmod(0o755)
    installed = folder / SUDOERS.name
    shutil.copy(SUDOERS, installed)
    installed.chmod(0o440)
    return folder


def with_drop_in(drop_in: Path, *command: str, group_file: Path | None = None, **run):
    """``command`` where /etc/sudoers.d is ``drop_in`` (and /etc/group ``group_file``)."""
    mounts = 'mount --bind "$1" /etc/sudoers.d && shift'
    if group_file is not None:
        mounts += f" && mount --bind {group_file} /etc/group"
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
         f'{mounts} && exec "$@"', "sh", str(drop_in), *command],
        capture_output=True, text=True, check=False, **run,
    )  # fmt: skip


def allowed(drop_in: Path, *, user: str, command: list[str], **options) -> bool:
    """Whether sudo lets the worker's user run ``command`` as ``user`` (asked as root with
    ``sudo -l``, which runs nothing)."""
    asked = ["sudo", "-l", "-U", WORKER_USER, "-u", user, *command]
    checked = with_drop_in(drop_in, *asked, **options)
    return checked.returncode == 0


def request(user: str = "alice", account: str = "nosuchaccount") -> SubmitRequest:
    return SubmitRequest(
        user=user, script="#!/bin/bash\ntrue\n", account=account, partition="debug",
        name="sudoers", time_limit_minutes=1, working_directory="/tmp",
        stdout_path="/tmp/slurm-%j.out", stderr_path="/tmp/slurm-%j.out", gpus_per_node=1,
        environment={"OMP_NUM_THREADS": "1"}, comment="portal:00000000-0000-0000-0000-0000000000ab",
    )  # fmt: skip


def commands_run_as_a_user(monkeypatch, account: str = "nosuchaccount") -> list[list[str]]:
    """Every command line the cli backend runs through the run-as prefix, recorded from
    each protocol call that acts as a job's owner (nothing runs): submit, estimate,
    cancel, hold, release."""
    recorded: list[list[str]] = []

    def record(command, **_):
        recorded.append(command)
        out = "4242\n" if "--parsable" in command else ""
        err = ESTIMATE if "--test-only" in command else ""
        return subprocess.CompletedProcess(command, 0, stdout=out, stderr=err)

    client = CliClient(cluster_name=DEV_CLUSTER, run_as_prefix=PRODUCTION_PREFIX, timeout_s=20)
    with monkeypatch.context() as patched:
        patched.setattr(cli.subprocess, "run", record)
        client.submit(request(account=account))
        client.estimate_start(request(account=account))
        client.cancel(NO_SUCH_JOB, user="alice")
        client.hold(NO_SUCH_JOB, user="alice")
        client.release(NO_SUCH_JOB, user="alice")
    return recorded


def test_visudo_accepts_the_drop_in():
    checked = subprocess.run(["visudo", "-cf", str(SUDOERS)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "parsed OK" in checked.stdout


def test_every_command_the_worker_runs_as_a_researcher_is_allowed(drop_in, monkeypatch):
    # The five protocol calls above are all that pass as_user= (a new one fails here, to
    # be listed in the drop-in or refused).
    assert len(re.findall(r"as_user=(?!as_user\b)", Path(cli.__file__).read_text())) == 5
    commands = commands_run_as_a_user(monkeypatch)
    tools = [command[4:6] for command in commands]
    assert tools == [
        ["sbatch", "--parsable"], ["sbatch", "--test-only"], ["scancel", "--verbose"],
        ["scontrol", "hold"], ["scontrol", "release"],
    ]  # fmt: skip
    for command in commands:
        assert command[:4] == ["sudo", "-n", "-u", "alice"], command
        assert allowed(drop_in, user="alice", command=command[4:]), command


def test_nothing_else_is_allowed(drop_in, monkeypatch, tmp_path):
    submit, _, cancel, *_ = commands_run_as_a_user(monkeypatch)
    sbatch = submit[4:]
    # Not as root, a system account, the web tier's user, or someone not a researcher.
    for user in ("root", "slurm", "portal-web", "nobody", WORKER_USER):
        assert not allowed(drop_in, user=user, command=sbatch), user
    # Not as a researcher who is also an administrator (here bob, in group sudo).
    group = tmp_path / "group"
    groups = Path("/etc/group").read_text()
    group.write_text(re.sub(r"^sudo:x:(\d+):.*$", r"sudo:x:\1:bob", groups, flags=re.M))
    group.chmod(0o644)
    assert allowed(drop_in, user="bob", command=sbatch)
    assert not allowed(drop_in, user="bob", command=sbatch, group_file=group)
    # No other tool, nor the same tools with other arguments.
    for command in (
        ["/bin/sh", "-c", "id"],
        ["bash"],
        ["sudoedit", "/etc/passwd"],
        ["squeue"],
        ["sbatch", "--wrap", "id"],
        ["sbatch", "--parsable"],
        ["scancel", "--verbose", "1", "--signal=KILL"],
        ["scancel", "--user=alice"],
        ["scontrol", "update", "jobid=1", "priority=1"],
        ["scontrol", "hold", "1", "2"],
        ["/usr/local/bin/sbatch", *sbatch[1:]],
    ):
        assert not allowed(drop_in, user="alice", command=command), command
    assert allowed(drop_in, user="alice", command=cancel[4:])
    # And the web tier's user may run nothing at all.
    listing = with_drop_in(drop_in, "sudo", "-l", "-U", "portal-web")
    assert "is not allowed to run sudo" in listing.stdout + listing.stderr


@pytest.mark.slurm
@pytest.mark.django_db(transaction=True)
def test_the_worker_s_user_estimates_and_cancels_as_the_researcher_through_sudo(
    drop_in, monkeypatch, make_project, alice
):
    """The recorded command lines, run for real as the worker's user: sudo runs Slurm's
    tools as alice with the environment the cli backend gives them."""
    project = make_project(members={alice: "pi"}, gpu_hours=1)
    _, estimate, cancel, *_ = commands_run_as_a_user(monkeypatch, account=project.slurm_account)

    def as_worker(command: list[str], stdin: str = "") -> subprocess.CompletedProcess:
        return with_drop_in(
            drop_in, "runuser", "-u", WORKER_USER, "--", "env", "-i",
            *(f"{k}={v}" for k, v in slurm_environment().items()), *command,
            input=stdin, cwd="/",
        )  # fmt: skip

    estimated = as_worker(estimate, request().script)
    assert estimated.returncode == 0, estimated.stderr
    assert parse_test_only(estimated.stderr + estimated.stdout).starts_at is not None
    cancelled = as_worker(cancel)
    assert "Invalid job id specified" in cancelled.stderr, cancelled.stderr
    # Not as root, even with the same tool and arguments.
    refused = as_worker(["sudo", "-n", "-u", "root", *cancel[4:]])
    assert refused.returncode != 0 and "password is required" in refused.stderr
