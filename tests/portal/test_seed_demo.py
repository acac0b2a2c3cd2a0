"""seed_demo builds a usable dev portal on the live cluster, and a re-run changes nothing."""

import pwd
import subprocess
import time
from io import StringIO

import pytest
from django.core.management import call_command

from accounts.models import Allocation, Membership, Project, User
from clusters.models import Cluster, Partition
from clusters.slurm import client_for
from portal.devstack import CLUSTER_NEXT, NEXT_CLUSTER, is_running, script_env

pytestmark = pytest.mark.slurm


def seed(*args: str) -> str:
    out = StringIO()
    call_command("seed_demo", *args, stdout=out)
    return out.getvalue()


def sacct_fields(job_id: str) -> dict[str, str]:
    result = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "User,Account,State,AllocTRES,Comment"],
        capture_output=True,
        text=True,
        check=True,
    )
    line = result.stdout.strip()
    if not line:
        return {}
    user, account, state, tres, comment = line.split("|")
    return {"user": user, "account": account, "state": state, "tres": tres, "comment": comment}


def test_it_creates_the_demo_world_and_a_rerun_changes_nothing(db, slurm_stack):
    first = seed()
    counts = [model.objects.count() for model in (User, Project, Membership, Allocation, Partition)]
    second = seed()

    assert counts == [
        model.objects.count() for model in (User, Project, Membership, Allocation, Partition)
    ]
    assert User.objects.filter(username__in=["alice", "bob", "pat", "olga", "manny"]).count() == 5
    assert Membership.objects.get(user__username="pat", project__slug="vision").role == "pi"
    assert not Membership.objects.filter(user__username="olga", project__slug="vision").exists()
    manny = User.objects.get(username="manny")
    assert manny.is_staff and manny.groups.filter(name="Allocation managers").exists()
    on_dev = Allocation.objects.filter(state="active", cluster__name="portal-dev")
    assert sorted(on_dev.values_list("project__slug", flat=True)) == ["genomics", "vision"]
    assert {"gpu", "debug"} <= set(
        Partition.objects.filter(cluster__name="portal-dev").values_list("name", flat=True)
    )
    for name in ("alice", "bob", "pat", "olga"):
        assert pwd.getpwnam(name).pw_uid != 0

    # Passwords are printed when a user is created, and only then.
    assert "Demo logins:" in first and "Demo logins:" in second
    assert second.count("(unchanged;") == 5
    assert "portal user" not in second


def test_reset_passwords_prints_working_new_ones(db, slurm_stack):
    seed()
    output = seed("--reset-passwords")
    line = next(line for line in output.splitlines() if line.strip().startswith("alice "))
    password = line.split()[1]
    assert User.objects.get(username="alice").check_password(password)


def test_a_demo_researchers_gpu_job_runs_as_them_and_is_accounted(db, slurm_stack, tmp_path):
    seed()
    home = pwd.getpwnam("alice").pw_dir
    submitted = subprocess.run(
        ["runuser", "-u", "alice", "--", "sbatch", "--parsable", "--account=vision",
         "--partition=debug", "--gpus=1", "--time=2", "--comment=portal:seed-test",
         f"--chdir={home}", "--output=seed-test-%j.out", "--wrap", "id -un"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    job_id = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 60
    while (fields := sacct_fields(job_id)).get("state") != "COMPLETED":
        assert fields.get("state") not in {"FAILED", "CANCELLED", "TIMEOUT"}, fields
        assert time.monotonic() < deadline, f"job {job_id} did not complete: {fields}"
        time.sleep(0.5)
    assert fields["user"] == "alice"
    assert fields["account"] == "vision"
    assert "gres/gpu=1" in fields["tres"]
    assert fields["comment"] == "portal:seed-test"
    output = f"{home}/seed-test-{job_id}.out"
    with open(output) as handle:
        assert handle.read().strip() == "alice"


def test_portal_next_is_seeded_when_it_runs(db, slurm_stack):
    if not is_running(CLUSTER_NEXT):
        pytest.skip(f"{NEXT_CLUSTER} is not running: dev/cluster-next start")
    seed()
    tools = script_env(CLUSTER_NEXT)
    cluster = Cluster.objects.get(name=NEXT_CLUSTER)
    assert (cluster.backend, cluster.command_prefix, cluster.run_as_prefix) == (
        "cli",
        tools["SLURM_COMMAND_PREFIX"],
        tools["SLURM_RUN_AS_PREFIX"],
    )
    partitions = {p.name: p for p in cluster.partitions.all()}
    assert partitions["batch"].is_default and partitions["short"].max_time_minutes == 60
    assert (partitions["short"].gpus_per_node, partitions["short"].gpu_type) == (4, "b200")
    on_next = Allocation.objects.filter(state="active", cluster=cluster)
    assert sorted(on_next.values_list("project__slug", flat=True)) == ["genomics", "vision"]
    # The reconciler gave portal-next's Slurm the projects' accounts and members.
    assert {"alice", "bob", "pat"} <= set(client_for(cluster).account_limits("vision").users)
