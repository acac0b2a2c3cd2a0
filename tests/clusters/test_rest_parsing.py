"""The rest adapter's pure logic: JWT minting and parsers of slurmrestd answers
recorded from the dev cluster (Slurm 22.05)."""

import base64
import datetime as dt
import hashlib
import hmac
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from clusters.slurm.errors import NotFound, SlurmRejected, SlurmUnavailable
from clusters.slurm.jwt import mint_token
from clusters.slurm.rest import RestClient
from clusters.slurm.rest_parsing import (
    accounting_exit_code,
    allocated_gpus,
    cpu_minutes_limit,
    decode_wait_status,
    error_for,
    errors_message,
    gpu_minutes_limit,
    job_description,
    max_submit_jobs,
    newest_versions,
    parse_account_list,
    parse_accounting,
    parse_partitions,
    parse_queue,
    parse_queue_exit_codes,
    pending_array_tasks,
    submitted_job_id,
)
from clusters.slurm.states import SlurmJobState
from clusters.slurm.types import SubmitRequest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurmrestd"
WHERE = "GET http://slurmrestd/test"


def recorded(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def utc(epoch: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, dt.UTC)


def b64decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def request(**changes) -> SubmitRequest:
    base = SubmitRequest(
        user="alice",
        script="#!/bin/bash\ntrue\n",
        account="vision",
        partition="debug",
        name="train",
        time_limit_minutes=30,
        working_directory="/home/alice",
        stdout_path="/home/alice/out-%j.txt",
        stderr_path="/home/alice/err-%j.txt",
    )
    return replace(base, **changes)


# --- JWT ---------------------------------------------------------------------------


def test_a_token_is_hs256_over_the_key_with_the_user_and_its_lifetime():
    token = mint_token(key=b"k" * 32, user="alice", issued_at=1_796_000_000, lifetime_s=300)
    header, claims, signature = token.split(".")
    assert json.loads(b64decode(header)) == {"alg": "HS256", "typ": "JWT"}
    assert json.loads(b64decode(claims)) == {
        "sun": "alice",
        "iat": 1_796_000_000,
        "exp": 1_796_000_300,
    }
    expected = hmac.new(b"k" * 32, f"{header}.{claims}".encode(), hashlib.sha256).digest()
    assert b64decode(signature) == expected
    assert "=" not in token  # base64url without padding, as JWT wants


def test_a_token_signed_with_another_key_differs():
    one = mint_token(key=b"a" * 32, user="alice", issued_at=1, lifetime_s=60)
    other = mint_token(key=b"b" * 32, user="alice", issued_at=1, lifetime_s=60)
    assert one.rsplit(".", 1)[0] == other.rsplit(".", 1)[0]
    assert one != other


@pytest.mark.parametrize(("key", "lifetime_s"), [(b"", 60), (b"k", 0), (b"k", -5)])
def test_minting_refuses_an_empty_key_or_a_lifetime_that_is_not_positive(key, lifetime_s):
    with pytest.raises(ValueError):
        mint_token(key=key, user="alice", issued_at=1, lifetime_s=lifetime_s)


def client(key_file: Path, **changes) -> RestClient:
    arguments = {
        "cluster_name": "portal-dev",
        "base_url": "http://127.0.0.1:9",
        "jwt_key_file": str(key_file),
        "admin_user": "slurm",
        "timeout_s": 5,
        "token_lifetime_s": 300,
    }
    return RestClient(**{**arguments, **changes})


def test_tokens_are_cached_per_user_until_shortly_before_they_expire(tmp_path, monkeypatch):
    key_file = tmp_path / "jwt.key"
    key_file.write_bytes(b"s" * 32)
    rest = client(key_file)
    now = [1_796_000_000.0]
    monkeypatch.setattr("clusters.slurm.rest.time.time", lambda: now[0])
    first = rest._token("alice")
    now[0] += 200
    assert rest._token("alice") == first
    assert rest._token("bob") != first
    now[0] += 80  # 20 s left: less than the request timeout plus a margin
    renewed = rest._token("alice")
    assert renewed != first
    assert json.loads(b64decode(renewed.split(".")[1]))["iat"] == 1_796_000_280


def test_the_key_is_read_lazily_and_an_unreadable_key_is_unavailable_naming_it(tmp_path):
    missing = tmp_path / "absent.key"
    rest = client(missing)  # constructing reads nothing
    with pytest.raises(SlurmUnavailable, match=re.escape(str(missing))):
        rest._token("alice")
    missing.write_bytes(b"")
    with pytest.raises(SlurmUnavailable, match="empty"):
        client(missing)._token("alice")


def test_a_user_name_that_cannot_be_a_header_is_refused(tmp_path):
    key_file = tmp_path / "jwt.key"
    key_file.write_bytes(b"s" * 32)
    with pytest.raises(SlurmRejected):
        client(key_file)._token("alice\nX-Evil: 1")


# --- versions ----------------------------------------------------------------------


def test_the_newest_api_the_client_speaks_is_chosen_for_slurm_and_slurmdb():
    paths = list(recorded("openapi_paths.json")["paths"])
    assert "/slurm/v0.0.36/jobs" in paths and "/slurmdb/v0.0.36/jobs" in paths
    assert newest_versions(paths) == ("v0.0.38", "v0.0.38")
    assert newest_versions([p for p in paths if "v0.0.38" not in p]) == ("v0.0.37", "v0.0.37")


def test_a_version_the_parsers_do_not_know_is_not_chosen():
    assert newest_versions(["/slurm/v0.0.36/ping", "/slurm/v0.0.40/ping"]) == (None, None)
    assert newest_versions(["/slurm/v0.0.38/ping"]) == ("v0.0.38", None)


# --- the queue -----------------------------------------------------------------------


def test_the_queue_maps_states_reasons_arrays_and_times():
    jobs = {entry.job_id: entry for entry in parse_queue(recorded("jobs.json"))}
    assert set(jobs) == set(range(1278, 1289))
    running = jobs[1278]
    assert (running.state, running.user, running.account, running.partition) == (
        SlurmJobState.RUNNING,
        "alice",
        "vision",
        "debug",
    )
    assert running.comment == "portal:11111111-0000-0000-0000-000000000001"
    assert running.started_at == utc(1_796_217_324) and running.submitted_at.tzinfo is dt.UTC
    assert running.time_limit_minutes == 5 and running.array_job_id is None
    assert (jobs[1279].state, jobs[1279].reason) == (SlurmJobState.PENDING, "Dependency")
    assert jobs[1279].started_at is None
    assert jobs[1280].reason == "JobHeldUser"
    assert (jobs[1281].array_job_id, jobs[1281].array_task) == (1281, "0-3%2")
    assert (jobs[1288].array_job_id, jobs[1288].array_task) == (1282, "0")
    assert (jobs[1282].array_job_id, jobs[1282].array_task) == (1282, "1")
    assert jobs[1283].name == 'café|na"me' and jobs[1283].comment == ""
    assert jobs[1284].state == SlurmJobState.FAILED and jobs[1284].reason == "NonZeroExitCode"
    assert jobs[1285].state == SlurmJobState.COMPLETED
    assert jobs[1287].state == SlurmJobState.CANCELLED


def test_a_pending_jobs_forecast_start_is_not_a_start():
    payload = recorded("jobs.json")
    pending = next(j for j in payload["jobs"] if j["job_id"] == 1279)
    forecast = {**payload, "jobs": [{**pending, "start_time": 1_796_217_999}]}
    assert parse_queue(forecast)[0].started_at is None


def test_the_controller_keeps_the_exit_code_of_a_failed_job_as_a_wait_status():
    assert parse_queue_exit_codes(recorded("jobs.json")) == {1284: (3, 0), 1286: (0, 9)}
    assert decode_wait_status(768) == (3, 0)
    assert decode_wait_status(9) == (0, 9)
    assert decode_wait_status(0) == (0, 0)


# --- accounting ------------------------------------------------------------------------


def test_accounting_maps_jobs_gpus_comments_and_times():
    jobs = {entry.job_id: entry for entry in parse_accounting(recorded("accounting.json"))}
    running = jobs[1278]
    assert running.state == SlurmJobState.RUNNING and running.allocated_gpus == 2
    assert running.allocated_cpus == 1
    assert running.ended_at is None and running.started_at == utc(1_796_217_324)
    assert running.comment == ""  # accounting stores the comment when the job ends
    completed = jobs[1285]
    assert (completed.state, completed.exit_code, completed.signal) == (
        SlurmJobState.COMPLETED,
        0,
        0,
    )
    assert completed.comment == "portal:11111111-0000-0000-0000-000000000007"
    assert completed.allocated_gpus == 1 and completed.user == "alice"
    assert (completed.account, completed.partition) == ("vision", "debug")
    assert jobs[1287].state == SlurmJobState.CANCELLED and jobs[1287].elapsed_s == 1
    assert jobs[1287].ended_at == utc(1_796_217_325)
    assert jobs[1279].allocated_gpus == 0 and jobs[1279].started_at is None
    assert jobs[1279].allocated_cpus == 0
    assert jobs[1283].name == "café|na`me"  # slurmdbd stores '"' as '`'


def test_accounting_cannot_tell_a_failed_jobs_exit_code_but_keeps_signals():
    jobs = {entry.job_id: entry for entry in parse_accounting(recorded("accounting.json"))}
    assert jobs[1284].state == SlurmJobState.FAILED
    assert (jobs[1284].exit_code, jobs[1284].signal) == (None, None)  # 22.05 says SUCCESS, 0
    assert (jobs[1286].exit_code, jobs[1286].signal) == (0, 9)


@pytest.mark.parametrize(
    ("exit_code", "state", "expected"),
    [
        ({"status": "SUCCESS", "return_code": 0}, SlurmJobState.COMPLETED, (0, 0)),
        ({"status": "SUCCESS", "return_code": 0}, SlurmJobState.FAILED, (None, None)),
        ({"status": "ERROR", "return_code": 2}, SlurmJobState.FAILED, (2, 0)),
        ({"status": "SIGNALED", "signal": {"signal_id": 15}}, SlurmJobState.CANCELLED, (0, 15)),
        ({"status": "PENDING"}, SlurmJobState.PENDING, (None, None)),
        (None, SlurmJobState.PENDING, (None, None)),
    ],
)
def test_accounting_exit_codes(exit_code, state, expected):
    assert accounting_exit_code(exit_code, state) == expected


def test_accounting_keeps_the_last_run_of_a_requeued_job():
    entries = [e for e in parse_accounting(recorded("accounting.json")) if e.job_id == 1265]
    assert len(entries) == 1
    assert entries[0].state == SlurmJobState.COMPLETED
    assert entries[0].submitted_at == utc(1_796_217_098) and entries[0].elapsed_s == 20


def test_accounting_shows_array_tasks_and_a_pending_array_as_sacct_does():
    jobs = {entry.job_id: entry for entry in parse_accounting(recorded("accounting.json"))}
    assert (jobs[1281].array_job_id, jobs[1281].array_task) == (1281, "[0-3%2]")
    assert (jobs[1288].array_job_id, jobs[1288].array_task) == (1282, "0")
    assert (jobs[1282].array_job_id, jobs[1282].array_task) == (1282, "1")
    assert jobs[1278].array_job_id is None and jobs[1278].array_task is None


def test_a_pending_array_bitmap_becomes_ranges():
    assert pending_array_tasks({"task": "0x2D", "limits": {}}) == "[0,2-3,5]"
    assert pending_array_tasks({"task": "0x1"}) == "[0]"
    assert pending_array_tasks({"task": None}) is None


def test_gpus_count_the_untyped_total_or_else_the_typed_entries():
    assert allocated_gpus([{"type": "gres", "name": "gpu", "count": 2}]) == 2
    typed = [{"type": "gres", "name": "gpu:h200", "count": 3}]
    assert allocated_gpus(typed) == 3
    both = [*typed, {"type": "gres", "name": "gpu", "count": 3}]
    assert allocated_gpus(both) == 3
    assert allocated_gpus([{"type": "gres", "name": "shard", "count": 4}]) == 0
    assert allocated_gpus(None) == 0


# --- errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "slurm_says"),
    [
        ("submit_refused_account.json", "Invalid account or account/partition combination"),
        ("submit_refused_gpus.json", "Requested node configuration is not available"),
        ("submit_unknown_key.json", 'Unknown key "tres_per_node"'),
    ],
)
def test_a_refused_submission_carries_slurms_own_message(fixture, slurm_says):
    payload = recorded(fixture)
    assert submitted_job_id(payload) is None
    error = error_for(payload, where=WHERE)
    assert isinstance(error, SlurmRejected)
    assert slurm_says in error.message


def test_the_messages_of_an_error_list_are_joined_without_repeats():
    assert errors_message(recorded("submit_unknown_key.json")) == (
        'Unknown key "tres_per_node"; Failure during parsing'
    )
    assert errors_message(recorded("cancel_unknown.json")) == (
        "unable to kill JobId=99999999 with signal 9: Invalid job id specified"
    )
    assert errors_message({"errors": []}) == ""


def test_a_job_id_beside_an_error_is_a_queued_job():
    assert submitted_job_id(recorded("submit_held.json")) == 1280


def test_an_unknown_job_is_not_found():
    assert isinstance(error_for(recorded("cancel_unknown.json"), where=WHERE), NotFound)
    assert isinstance(error_for(recorded("accounting_nothing_found.json"), where=WHERE), NotFound)


@pytest.mark.parametrize(
    "fixture",
    ["jobs_controller_down.json", "submit_controller_down.json", "accounting_slurmdbd_down.json"],
)
def test_a_stopped_daemon_is_unavailable(fixture):
    error = error_for(recorded(fixture), where=WHERE)
    assert isinstance(error, SlurmUnavailable)
    assert WHERE in str(error)


def test_a_token_slurmdbd_refuses_is_rejected_and_says_so():
    error = error_for(recorded("accounting_token_refused.json"), where=WHERE)
    assert isinstance(error, SlurmRejected)
    assert "token" in error.message and "Protocol authentication error" in error.message


# --- partitions and limits --------------------------------------------------------------


def test_partitions_carry_limits_and_gpus_from_the_nodes_gres():
    partitions = {
        p.name: p for p in parse_partitions(recorded("partitions.json"), recorded("nodes.json"))
    }
    gpu, debug = partitions["gpu"], partitions["debug"]
    assert gpu.is_default and not debug.is_default
    assert gpu.is_up and debug.is_up
    assert (gpu.max_time_minutes, debug.max_time_minutes) == (7 * 24 * 60, 60)
    assert (debug.nodes, debug.gpus_per_node, debug.gpu_type, debug.total_gpus) == (
        1,
        8,
        "h200",
        8,
    )


def test_an_unlimited_partition_has_no_time_limit():
    payload = recorded("partitions.json")
    unlimited = {"partitions": [{**payload["partitions"][0], "max_time_limit": None}]}
    assert parse_partitions(unlimited, {"nodes": []})[0].max_time_minutes is None
    infinite = {"partitions": [{**payload["partitions"][0], "max_time_limit": 0xFFFFFFFF}]}
    assert parse_partitions(infinite, {"nodes": []})[0].max_time_minutes is None


def test_the_gpu_minutes_limit_of_an_association():
    associations = {a["user"]: a for a in recorded("associations.json")["associations"]}
    assert gpu_minutes_limit(associations["alice"]) == 77
    assert gpu_minutes_limit(associations[None]) is None
    assert cpu_minutes_limit(associations["alice"]) is None
    assert max_submit_jobs(associations["alice"]) is None


def test_the_cpu_limit_and_max_submit_jobs_of_an_association():
    # As slurmrestd 22.05 showed them after sacctmgr set GrpTRESMins=cpu=100,gres/gpu=50,
    # MaxSubmitJobs=7 and GrpSubmitJobs=9 on an account.
    association = {
        "max": {
            "jobs": {"per": {"submitted": 9}, "total": 7},
            "tres": {
                "group": {
                    "minutes": [
                        {"type": "cpu", "name": None, "id": 1, "count": 100},
                        {"type": "gres", "name": "gpu", "id": 1001, "count": 50},
                    ]
                }
            },
        }
    }
    assert (cpu_minutes_limit(association), gpu_minutes_limit(association)) == (100, 50)
    assert max_submit_jobs(association) == 7


# --- the job description -----------------------------------------------------------------


def test_the_job_description_carries_the_authoritative_fields():
    job = job_description(
        request(
            gpus_per_node=2,
            cpus_per_gpu=4,
            mem_per_gpu_mb=16_000,
            nodes=2,
            environment={"FOO": "bar baz"},
            array="0-9%2",
            after_ok=(11, 12),
            comment="portal:abc",
        )
    )
    assert job == {
        "account": "vision",
        "partition": "debug",
        "name": "train",
        "nodes": 2,
        "time_limit": 30,
        "current_working_directory": "/home/alice",
        "standard_output": "/home/alice/out-%j.txt",
        "standard_error": "/home/alice/err-%j.txt",
        "environment": {"FOO": "bar baz"},
        "gpus_per_node": 2,
        "cpus_per_gpu": 4,
        "memory_per_gpu": 16_000,
        "array": "0-9%2",
        "dependency": "afterok:11:12",
        "comment": "portal:abc",
    }


def test_an_empty_environment_still_gives_slurmrestd_one_variable_slurm_sets_anyway():
    job = job_description(request())
    assert job["environment"] == {"SLURM_JOB_NAME": "train"}
    assert not {"gpus_per_node", "array", "dependency", "comment"} & set(job)
    assert not {"tres_per_node", "tres_per_job"} & set(job)


def test_an_environment_key_with_an_equals_sign_is_refused():
    with pytest.raises(ValueError):
        job_description(request(environment={"A=B": "1"}))


def test_the_accounts_a_cluster_already_has_are_listed_as_sacctmgr_lists_them():
    from tests.clusters.test_cli_parsing import HAND_MADE

    accounts = parse_account_list(
        recorded("accounts.json"), recorded("associations_all.json"), cluster="portal-dev"
    )
    by_name = {account.name: account for account in accounts}
    assert list(by_name) == ["adoptrec", "adoptrecgrp", "contract"]
    adoptrec = by_name["adoptrec"]
    assert (adoptrec.organization, adoptrec.parent) == ("physics", "adoptrecgrp")
    assert adoptrec.description == "lattice qcd | group"
    assert adoptrec.limits == HAND_MADE
    # Another cluster's associations in the same answer are not this one's.
    assert (
        parse_account_list(
            recorded("accounts.json"), recorded("associations_all.json"), cluster="elsewhere"
        )
        == []
    )
