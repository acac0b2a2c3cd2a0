"""Log lines: one record a line, plain or JSON, with the request id, user, task and job
they concern; the request id goes from a web request into the task it enqueued."""

import io
import json
import logging
import re
import sys

import pytest
from django.test import Client

from accounts.tokens import token_create
from audit.log_context import log_context, log_context_bound
from jobs.models import Job
from portal.logs import REQUEST_ID_HEADER, JsonFormatter, PlainFormatter
from tests.conftest import REPO, running_worker
from tests.factories import wait_for

PLAIN = "%(asctime)s %(levelname)s %(name)s %(message)s"
FORGED = "job name\n2030-01-01 00:00:00,000 ERROR jobs.tasks forged\r\x1b[2K\u2028done"


@pytest.fixture
def json_lines():
    """json_lines(): what the root logger wrote since, through the JSON formatter, each
    line parsed (the test process logs in the plain format)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        root.removeHandler(handler)


def record(message: str, *args: object, exc_info=None) -> logging.LogRecord:
    return logging.LogRecord("jobs.tasks", logging.WARNING, __file__, 1, message, args, exc_info)


def test_a_json_line_carries_the_bound_fields_and_stays_one_line():
    with log_context_bound(request_id="r-1", user="alice", job_id=7):
        line = JsonFormatter().format(record("refused: %s", FORGED))
    assert "\n" not in line and "\r" not in line and "\u2028" not in line
    entry = json.loads(line)
    assert entry["message"] == f"refused: {FORGED}"
    assert (entry["level"], entry["logger"]) == ("WARNING", "jobs.tasks")
    assert (entry["request_id"], entry["user"], entry["job_id"]) == ("r-1", "alice", 7)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["timestamp"])
    assert "exception" not in entry and "task_id" not in entry


def test_a_json_line_carries_the_exception_text():
    try:
        raise ValueError(FORGED)
    except ValueError:
        line = JsonFormatter().format(record("failed", exc_info=sys.exc_info()))
    assert "\n" not in line
    exception = json.loads(line)["exception"]
    assert exception.startswith("Traceback") and exception.endswith(f"ValueError: {FORGED}")


def test_a_plain_line_escapes_what_could_forge_another_line():
    line = PlainFormatter(PLAIN).format(record("refused: %s", FORGED))
    assert "\n" not in line and "\r" not in line and "\x1b" not in line and "\u2028" not in line
    assert line.endswith(
        r"refused: job name\n2030-01-01 00:00:00,000 ERROR jobs.tasks forged\r\x1b[2K\u2028done"
    )


def test_a_plain_traceback_follows_indented_so_no_line_of_it_passes_for_a_record():
    try:
        raise ValueError(FORGED)
    except ValueError:
        text = PlainFormatter(PLAIN).format(record("failed", exc_info=sys.exc_info()))
    first, *rest = text.split("\n")
    assert first.endswith("WARNING jobs.tasks failed")
    assert rest[0] == "  Traceback (most recent call last):"
    assert all(line.startswith("  ") for line in rest)
    assert rest[-2:] == ["  ValueError: job name", r"  2030-01-01 00:00:00,000 ERROR jobs.tasks "
                         r"forged\r\x1b[2K\u2028done"]  # fmt: skip


def not_found(client: Client, **headers: str):
    """A 404 from the API (401 without credentials): Django logs it (django.request) after
    the middleware has returned it."""
    response = client.get("/api/v1/jobs/999999999/", headers=headers)
    assert response.status_code in (401, 404)
    return response


@pytest.mark.django_db
def test_a_request_logs_with_its_id_and_user_and_returns_the_id(alice, json_lines):
    browser = Client()
    browser.force_login(alice)
    response = not_found(browser)
    assert response.status_code == 404
    request_id = response[REQUEST_ID_HEADER]
    assert re.fullmatch(r"[0-9a-f]{32}", request_id)
    [entry] = [e for e in json_lines() if e["logger"] == "django.request"]
    assert entry["message"] == "Not Found: /api/v1/jobs/999999999/"
    assert (entry["request_id"], entry["user"]) == (request_id, "alice")
    assert log_context() == {}  # nothing of the request is left bound after it
    # Another request, another id.
    assert not_found(browser)[REQUEST_ID_HEADER] != request_id


@pytest.mark.django_db
def test_an_api_token_names_its_user_in_the_lines(alice, json_lines):
    _, token = token_create(user=alice, name="logs")
    response = not_found(Client(headers={"Authorization": f"Bearer {token}"}))
    [entry] = [e for e in json_lines() if e["logger"] == "django.request"]
    assert (entry["request_id"], entry["user"]) == (response[REQUEST_ID_HEADER], "alice")


@pytest.mark.django_db
def test_the_proxys_well_formed_request_id_is_kept(settings, json_lines):
    settings.PROXY_COUNT = 1
    response = not_found(Client(), **{REQUEST_ID_HEADER: "6f1c2a/edge-7:1+x=y"})
    assert response[REQUEST_ID_HEADER] == "6f1c2a/edge-7:1+x=y"
    [entry] = [e for e in json_lines() if e["logger"] == "django.request"]
    assert entry["request_id"] == "6f1c2a/edge-7:1+x=y" and "user" not in entry


@pytest.mark.django_db
@pytest.mark.parametrize(
    "hostile",
    ["abc\n2030-01-01 ERROR forged", "a b", "x" * 101, "<script>", "id\x1b[2K", "ü-ñ"],
)
def test_a_malformed_request_id_is_replaced(settings, hostile):
    settings.PROXY_COUNT = 1
    given = not_found(Client(), **{REQUEST_ID_HEADER: hostile})[REQUEST_ID_HEADER]
    assert given != hostile and re.fullmatch(r"[0-9a-f]{32}", given)


@pytest.mark.django_db
def test_without_a_proxy_a_clients_request_id_is_not_taken(settings):
    settings.PROXY_COUNT = 0
    given = not_found(Client(), **{REQUEST_ID_HEADER: "chosen-by-the-client"})
    assert given[REQUEST_ID_HEADER] != "chosen-by-the-client"


@pytest.mark.slurm
@pytest.mark.django_db(transaction=True)
def test_the_request_id_goes_with_the_job_into_the_workers_lines(
    settings, make_project, alice, workdir, json_lines
):
    settings.PROXY_COUNT = 1
    project = make_project(members={alice: "pi"}, in_slurm=True)
    _, token = token_create(user=alice, name="logs")
    body = {
        "project": project.slug,
        "partition": "debug",
        "name": "logs",
        "gpus_per_node": 0,
        "time_limit_minutes": 1,
        "working_directory": str(workdir),
        "script": "true\n",
    }
    with running_worker(PORTAL_LOG_FORMAT="json") as (queue, _, _):
        response = Client(headers={"Authorization": f"Bearer {token}"}).post(
            "/api/v1/jobs/",
            body,
            content_type="application/json",
            headers={REQUEST_ID_HEADER: "edge-42"},
        )
        assert response.status_code == 201, response.content
        job_id = response.json()["id"]
        slurm_job_id = wait_for(
            lambda: Job.objects.get(pk=job_id).slurm_job_id, what="the worker to submit the job"
        )
        log = REPO / "var" / f"{queue}.log"
        submitted = f"job {job_id} submitted: Slurm job {slurm_job_id} on portal-dev"
        wait_for(lambda: submitted in log.read_text(), what="the worker's line")
    [saved] = [e for e in json_lines() if e["message"].startswith(f"job {job_id} saved")]
    assert (saved["request_id"], saved["user"], saved["job_id"]) == ("edge-42", "alice", job_id)

    # The worker's logging is JSON (Celery's start-up banner aside, which is no log line).
    entries = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    [line] = [e for e in entries if e["message"] == submitted]
    assert line["request_id"] == "edge-42" and line["job_id"] == job_id
    assert line["task"] == "jobs.tasks.job_submit_task"
    # The task id is the one Celery's own lines give for that task.
    received = f"Task jobs.tasks.job_submit_task[{line['task_id']}] received"
    assert any(e["message"] == received for e in entries), entries
    log.unlink()
