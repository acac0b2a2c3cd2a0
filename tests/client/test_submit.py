"""sgp submit and sgp estimate: the request they send (flags, job files, scripts), the
Idempotency-Key that makes a retried submit one job, and what they print."""

import io
import json
import sys
import uuid

import httpx
import pytest

from tests.client.conftest import error, job_json


def created(request: httpx.Request) -> httpx.Response:
    return httpx.Response(201, json=job_json(id=12, state="new", **json.loads(request.content)))


def body(request: httpx.Request) -> dict:
    return json.loads(request.content)


def test_flags_become_the_apis_job_request(sgp, portal, tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("python train.py\n")
    portal.on("POST", "jobs/", created)
    result = sgp(
        "submit", "--project", "vision", "--partition", "debug", "--gpus", "2", "--nodes", "1",
        "--time", "1:30", "--name", "train", "--workdir", "/home/alice/runs", "--array", "0-3",
        "--env", "EPOCHS=3", "--env", "LR=0.1", "--depends-on", "7", "--template", "3",
        "--cpus-per-gpu", "4", "--mem-per-gpu", "16", "--script", str(script),
        portal=portal,
    )  # fmt: skip
    assert result.code == 0, result.err
    assert result.out == "12\n"  # only the id: JOB=$(sgp submit …)
    (request,) = portal.sent("POST", "jobs/")
    assert body(request) == {
        "project": "vision",
        "partition": "debug",
        "gpus_per_node": 2,
        "nodes": 1,
        "time_limit_minutes": 90,
        "name": "train",
        "working_directory": "/home/alice/runs",
        "array": "0-3",
        "environment": {"EPOCHS": "3", "LR": "0.1"},
        "depends_on": [7],
        "template": 3,
        "cpus_per_gpu": 4,
        "mem_per_gpu_gb": 16,
        "script": "python train.py\n",
    }
    assert uuid.UUID(request.headers["Idempotency-Key"])
    assert request.headers["Content-Type"] == "application/json"


def test_a_job_file_with_flags_on_top(sgp, portal, tmp_path):
    (tmp_path / "run.sh").write_text("echo hi\n")
    job_file = tmp_path / "job.yaml"
    job_file.write_text(
        "project: vision\npartition: gpu\ntime_limit_minutes: 60\n"
        "environment: {A: '1'}\nscript_file: run.sh\n"
    )
    portal.on("POST", "jobs/", created)
    result = sgp("submit", str(job_file), "--partition", "debug", "--env", "B=2", portal=portal)
    assert result.code == 0, result.err
    assert body(portal.requests[0]) == {
        "project": "vision",
        "partition": "debug",
        "time_limit_minutes": 60,
        "environment": {"A": "1", "B": "2"},
        "script": "echo hi\n",
    }


@pytest.mark.parametrize(
    ("flags", "job_file", "sent"),
    [
        ((), "", None),  # left out: the template's, else the portal's no
        (("--requeue",), "", True),
        (("--no-requeue",), "", False),
        ((), "requeue: true\n", True),
        (("--no-requeue",), "requeue: true\n", False),  # the flag wins over the file
    ],
)
def test_requeue_is_sent_only_when_asked_either_way(sgp, portal, tmp_path, flags, job_file, sent):
    path = tmp_path / "job.yaml"
    path.write_text(job_file + "project: vision\n")
    portal.on("POST", "jobs/", created)
    assert sgp("submit", str(path), *flags, portal=portal).code == 0
    assert body(portal.requests[0]).get("requeue", "left out") == (
        "left out" if sent is None else sent
    )


def test_the_script_can_come_from_stdin(sgp, portal, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("sleep 3\necho done\n"))
    portal.on("POST", "jobs/", created)
    assert sgp("submit", "--project", "vision", "--script", "-", portal=portal).code == 0
    assert body(portal.requests[0])["script"] == "sleep 3\necho done\n"


def test_a_bad_job_file_is_a_usage_error_and_sends_nothing(sgp, portal, tmp_path):
    job_file = tmp_path / "job.yaml"
    job_file.write_text("gpus: 2\n")
    result = sgp("submit", str(job_file), portal=portal)
    assert result.code == 2
    assert "unknown key gpus" in result.err
    assert portal.requests == []


def test_json_prints_the_whole_job(sgp, portal):
    portal.on("POST", "jobs/", created)
    result = sgp("submit", "--project", "vision", "--json", portal=portal)
    assert result.json()["id"] == 12 and result.json()["project"] == "vision"


def test_a_retried_submit_sends_the_same_key_and_makes_one_job(sgp, portal):
    def dropped(request):
        raise httpx.ReadTimeout("timed out", request=request)

    portal.on("POST", "jobs/", dropped, httpx.Response(503, text="busy"), created)
    result = sgp("submit", "--project", "vision", portal=portal)
    assert result.code == 0, result.err
    assert result.out == "12\n"
    keys = {r.headers["Idempotency-Key"] for r in portal.sent("POST", "jobs/")}
    assert len(portal.sent("POST", "jobs/")) == 3 and len(keys) == 1


def test_a_given_key_is_sent_and_a_replay_is_said(sgp, portal):
    portal.on(
        "POST",
        "jobs/",
        httpx.Response(201, json=job_json(id=9), headers={"Idempotent-Replayed": "true"}),
    )
    result = sgp("submit", "--project", "vision", "--idempotency-key", "run-42", portal=portal)
    assert result.code == 0 and result.out == "9\n"
    assert portal.requests[0].headers["Idempotency-Key"] == "run-42"
    assert "used before" in result.err


def test_a_submit_that_never_got_an_answer_says_how_to_retry_safely(sgp, portal):
    def refused(request):
        raise httpx.ConnectError("connection refused", request=request)

    portal.on("POST", "jobs/", refused)
    result = sgp("submit", "--project", "vision", portal=portal)
    assert result.code == 6
    key = portal.requests[0].headers["Idempotency-Key"]
    assert f"--idempotency-key {key}" in result.err
    assert "does not answer" in result.err


def test_a_quota_refusal_exits_5_with_both_numbers(sgp, portal):
    portal.on(
        "POST",
        "jobs/",
        error(
            409,
            "quota_exceeded",
            "This needs 20.00 GPU-hours but only 9.50 are available.",
            requested_gpu_hours=20.0,
            available_gpu_hours=9.5,
        ),
    )
    result = sgp("submit", "--project", "vision", portal=portal)
    assert result.code == 5
    assert "requested 20.00 GPU-hours, available 9.50" in result.err
    assert len(portal.requests) == 1  # a refusal is final: no retry


def test_an_invalid_request_prints_each_fields_message(sgp, portal):
    portal.on(
        "POST",
        "jobs/",
        error(
            400,
            "invalid",
            "The job request is not valid; see fields for what to fix.",
            fields={
                "time_limit_minutes": ["At most 60 minutes on debug."],
                "__all__": ["Fix the fields."],
            },
        ),
    )
    result = sgp("submit", "--project", "vision", "--time", "90", portal=portal)
    assert result.code == 5
    assert "  time_limit_minutes: At most 60 minutes on debug." in result.err
    assert "  Fix the fields." in result.err


ESTIMATE = {
    "requested_gpu_hours": 1.5,
    "available_gpu_hours": 1234.5,
    "fits": True,
    "expected_start": "2026-01-02T03:04:05Z",
    "rendered_script": "#!/bin/bash\n#SBATCH --gpus-per-node=1\necho hi\n",
    "gpu_hours": 1.5,
    "billing_weight": 1.0,
    "gpu_part_gpu_hours": 1.5,
    "cpu_hours": 0.25,
    "cpu_hour_rate": 0.01,
    "cpu_part_gpu_hours": 0.0025,
}


def test_estimate_prints_cost_available_fits_and_start(sgp, portal):
    portal.on("POST", "jobs/estimate/", httpx.Response(200, json=ESTIMATE))
    result = sgp("estimate", "--project", "vision", "--gpus", "1", "--show-script", portal=portal)
    assert result.code == 0, result.err
    assert "cost            1.50 GPU-hours" in result.out
    assert "  GPUs          1.50 GPU-hours x 1.0 = 1.50" in result.out
    assert "  CPUs          0.25 CPU-hours x 0.01 = < 0.01" in result.out
    assert "available       1,234.50 GPU-hours" in result.out
    assert "fits            yes" in result.out
    assert "expected start  2026-01-0" in result.out
    assert result.out.endswith(ESTIMATE["rendered_script"])
    (request,) = portal.requests
    assert body(request) == {"project": "vision", "gpus_per_node": 1}
    assert "Idempotency-Key" not in request.headers


@pytest.mark.parametrize(("fits", "start", "shown"), [(False, None, "no"), (True, None, "unknown")])
def test_estimate_says_when_it_does_not_fit_or_has_no_start(sgp, portal, fits, start, shown):
    estimate = {**ESTIMATE, "fits": fits, "expected_start": start}
    portal.on("POST", "jobs/estimate/", httpx.Response(200, json=estimate))
    result = sgp("estimate", "--project", "vision", portal=portal)
    assert result.code == 0
    assert shown in result.out
    assert "#!/bin/bash" not in result.out


def test_estimate_json_is_the_apis(sgp, portal):
    portal.on("POST", "jobs/estimate/", httpx.Response(200, json=ESTIMATE))
    assert sgp("estimate", "--json", portal=portal).json() == ESTIMATE


def test_an_estimate_saves_nothing_so_it_is_retried_like_a_read(sgp, portal):
    busy = error(503, "slurm_unavailable", "The cluster does not answer.")
    portal.on("POST", "jobs/estimate/", busy)
    result = sgp("estimate", "--project", "vision", portal=portal)
    assert result.code == 6
    assert "does not answer" in result.err
    assert len(portal.requests) == 3
    portal.on("POST", "jobs/estimate/", busy, httpx.Response(200, json=ESTIMATE))
    assert sgp("estimate", "--project", "vision", portal=portal).code == 0
