"""sgp as a script runs it, on the real stack: the live test server, a worker with beat,
and the dev cluster. It submits a job, follows its output to the end, reads its charge,
and gets the exit codes of a quota refusal, an unknown job and a bad token."""

import json
import os
import subprocess
import sys

import pytest

from accounts.tokens import token_create
from jobs.models import Job
from tests.conftest import REPO, running_worker
from tests.factories import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]

SCRIPT = "sleep 3\necho hello from the cli\n"


@pytest.fixture
def cli_env(live_server, alice, tmp_path, settings):
    """The environment a script would give sgp: the portal's address and alice's token."""
    settings.API_RATE = None  # rate limits have their own tests; this one polls
    _, token = token_create(user=alice, name="cli test")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "SGP_"))}
    return {
        **env,
        "SGP_URL": live_server.url,
        "SGP_TOKEN": token,
        "SGP_CONFIG": str(tmp_path / "sgp.json"),  # never the real ~/.config/sgp
    }


def sgp(*argv: str, env: dict[str, str], stdin: str | None = None, timeout_s: float = 60):
    return subprocess.run(
        [sys.executable, "-m", "client", *argv],
        cwd=REPO,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def test_a_script_submits_a_job_follows_it_to_the_end_and_reads_its_charge(
    cli_env, make_project, alice, workdir
):
    project = make_project(members={alice: "member"}, gpu_hours=10)
    submit = ("submit", "--project", project.slug, "--partition", "debug", "--gpus", "1",
              "--time", "5", "--name", "cli", "--workdir", str(workdir),
              "--script", "-")  # fmt: skip
    with running_worker(beat=True):
        submitted = sgp(*submit, env=cli_env, stdin=SCRIPT)
        assert submitted.returncode == 0, submitted.stderr
        job_id = int(submitted.stdout)

        # The output, each piece once, to the end; 0: the job completed.
        followed = sgp("logs", str(job_id), "--follow", env=cli_env, timeout_s=180)
        assert followed.returncode == 0, followed.stderr
        assert followed.stdout == "hello from the cli\n"

        # Accounting charges the job a few seconds after it ended.
        def charged():
            shown = sgp("show", str(job_id), "--json", env=cli_env)
            assert shown.returncode == 0, shown.stderr
            job = json.loads(shown.stdout)
            return job if job["used_gpu_hours"] is not None else None

        job = wait_for(charged, timeout_s=60, interval_s=1, what="the job's charge")
        assert job["state"] == "completed" and job["exit_code"] == 0
        assert job["used_gpu_hours"] > 0
        assert "completed" in [event["state"] for event in job["events"]]

    # A retry with the same Idempotency-Key is the same job, not a second one.
    key = Job.objects.get(pk=job_id).idempotency_key
    again = sgp(*submit, "--idempotency-key", key, env=cli_env, stdin=SCRIPT)
    assert again.returncode == 0, again.stderr
    assert int(again.stdout) == job_id
    assert Job.objects.count() == 1

    listed = sgp("jobs", "--json", env=cli_env)
    assert [job["id"] for job in json.loads(listed.stdout)] == [job_id]

    # Over budget: 2 GPUs (and a CPU at 0.01) for 10 hours need 20.10 GPU-hours; refused
    # with both numbers.
    projects = sgp("projects", "--json", env=cli_env)
    (balance,) = [p["balance"] for p in json.loads(projects.stdout) if p["slug"] == project.slug]
    assert 0 < balance["available_gpu_hours"] < 10
    too_big = sgp(*submit, "--partition", "gpu", "--gpus", "2", "--time", "10:00",
                  env=cli_env, stdin=SCRIPT)  # fmt: skip
    assert too_big.returncode == 5, too_big.stderr
    assert "requested 20.10 GPU-hours" in too_big.stderr
    assert f"available {balance['available_gpu_hours']:.2f}" in too_big.stderr
    assert Job.objects.count() == 1

    unknown = sgp("show", "999999999", env=cli_env)
    assert unknown.returncode == 4
    assert "no job 999999999" in unknown.stderr

    bad_token = sgp("jobs", env={**cli_env, "SGP_TOKEN": "sgp_" + "x" * 43})
    assert bad_token.returncode == 3
    assert "not known" in bad_token.stderr


def test_a_script_sends_a_job_to_the_cluster_it_names(
    cli_env, celery_worker, make_project, dev_cluster, next_cluster, alice, workdir
):
    project = make_project(members={alice: "member"}, clusters=(dev_cluster, next_cluster))
    submitted = sgp(
        "submit", "--project", project.slug, "--cluster", "portal-next", "--partition", "short",
        "--gpus", "1", "--time", "5", "--workdir", str(workdir), "--script", "-",
        env=cli_env, stdin="true\n",
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job = Job.objects.get(pk=int(submitted.stdout))
    assert job.cluster == next_cluster
    wait_for(lambda: Job.objects.get(pk=job.pk).slurm_job_id, what="the job to reach portal-next")

    shown = sgp("show", str(job.pk), "--json", env=cli_env)
    assert json.loads(shown.stdout)["cluster"] == "portal-next"

    # Named for the wrong cluster, the partition is refused with what that cluster has.
    refused = sgp(
        "submit", "--project", project.slug, "--cluster", "portal-dev", "--partition", "short",
        "--gpus", "1", "--time", "5", "--workdir", str(workdir), "--script", "-",
        env=cli_env, stdin="true\n",
    )  # fmt: skip
    assert refused.returncode != 0
    assert "no partition 'short' on portal-dev" in refused.stderr
