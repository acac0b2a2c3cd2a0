"""Two first requests with one Idempotency-Key and one body, at the same time: one job,
one hold, and the answer that did not make it says it is a replay."""

import threading

import pytest

from accounts import ledger
from accounts.models import LedgerEntry
from jobs.models import Job
from tests.api.conftest import new_key, token_client
from tests.factories import blocked_on_a_lock, in_thread
from tests.jobs.test_forged_tokens import nobody_takes_submissions

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("transactional_db")]


def test_two_first_requests_with_one_key_make_one_job_and_the_second_is_a_replay(
    alice, project, workdir, monkeypatch
):
    body = {
        "project": project.slug,
        "partition": "debug",
        "name": "train",
        "gpus_per_node": 1,
        "time_limit_minutes": 30,
        "working_directory": str(workdir),
        "script": "echo hello\n",
    }
    headers = {"Idempotency-Key": new_key()}
    first_client, second_client = token_client(alice), token_client(alice)
    holding, held = threading.Event(), threading.Event()
    hold = ledger.ledger_hold

    def slow_hold(**kwargs):
        entry = hold(**kwargs)
        if not holding.is_set():
            holding.set()
            assert held.wait(timeout=30)
        return entry

    def post(client, name: str):
        answers[name] = client.post(
            "/api/v1/jobs/", body, content_type="application/json", headers=headers
        )

    monkeypatch.setattr(ledger, "ledger_hold", slow_hold)
    errors: list = []
    answers: dict = {}
    with nobody_takes_submissions():
        first = in_thread(lambda: post(first_client, "first"), errors)
        assert holding.wait(timeout=30)
        # The first has saved its job and holds its hours, not committed: the second finds
        # no job under the key, and its INSERT waits on the key's unique index.
        second = in_thread(lambda: post(second_client, "second"), errors)
        blocked_on_a_lock(
            second,
            'INSERT INTO "jobs_job"%',
            errors,
            what="the second request's INSERT to wait for the first's",
        )
        held.set()
        first.join(timeout=30)
        second.join(timeout=30)
    assert errors == []
    made, replayed = answers["first"], answers["second"]
    assert made.status_code == replayed.status_code == 201, (made.json(), replayed.json())
    assert replayed.json()["id"] == made.json()["id"]
    assert "Idempotent-Replayed" not in made
    assert replayed["Idempotent-Replayed"] == "true"
    assert Job.objects.count() == 1
    assert LedgerEntry.objects.filter(kind="hold").count() == 1
