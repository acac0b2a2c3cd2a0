"""The rest adapter's pure logic: JWT minting and parsers of slurmrestd answers
recorded from the dev clusters (Slurm 22.05, and 24.11's v0.0.40-v0.0.42)."""

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
    cancel_message,
    cancel_outcome,
    cpu_minutes_limit,
    decode_wait_status,
    error_codes,
    error_for,
    errors_message,
    gpu_minutes_limit,
    job_count_limits,
    job_description,
    job_state,
    limits_hold,
    max_submit_jobs,
    minutes_used,
    newest_versions,
    parse_account_list,
    parse_accounting,
    parse_partitions,
    parse_queue,
    parse_queue_exit_codes,
    pending_array_tasks,
    step_usage,
    submit_body,
    submitted_job_id,
    tres_minutes_limit,
    with_limits,
)
from clusters.slurm.states import SlurmJobState
from clusters.slurm.types import MinutesUsed, SubmitRequest

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
    assert newest_versions(["/slurm/v0.0.36/ping", "/slurm/v0.0.39/ping"]) == (None, None)
    assert newest_versions(["/slurm/v0.0.43/ping", "/slurm/v0.0.42/ping"]) == ("v0.0.42", None)
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


def test_accounting_keeps_every_run_of_a_requeued_job():
    listing = parse_accounting(recorded("accounting.json"))
    first, second = [e for e in listing if e.job_id == 1265]
    assert (first.state, first.elapsed_s, first.allocated_gpus) == (SlurmJobState.REQUEUED, 8, 1)
    assert (first.submitted_at, first.ended_at) == (utc(1_796_217_090), utc(1_796_217_098))
    assert (second.state, second.elapsed_s) == (SlurmJobState.COMPLETED, 20)
    assert second.submitted_at == utc(1_796_217_098)  # requeued: submitted again
    assert listing.refused == []


# The requeued jobs of ../cli/sacct*.txt (22040 on 22.05, 10023 on 24.11), read through
# slurmrestd as the ingest reads them (with their steps), beside the job whose name and
# comment are forged records of the victim 22034 / 10017 (../cli/README.md).
REQUEUED = [
    ("accounting_requeued.json", 22040, 22045, 22034, (2.254, 5.816), (12516, 12568)),
    ("24.11/accounting_requeued-v0.0.42.json", 10023, 10027, 10017, (2.295, 5.863),
     (13208, 13132)),
]  # fmt: skip


@pytest.mark.parametrize(("fixture", "requeued", "forger", "victim", "cpu_s", "peak_k"), REQUEUED)
def test_a_requeued_jobs_runs_are_each_listed_with_their_own_submit_time_and_steps(
    fixture, requeued, forger, victim, cpu_s, peak_k
):
    listing = parse_accounting(recorded(fixture))
    first, second = [e for e in listing if e.job_id == requeued]
    assert (first.state, second.state) == (SlurmJobState.REQUEUED, SlurmJobState.COMPLETED)
    # The requeue submits the job again: the second run's submit time is the first's end.
    assert first.submitted_at < second.submitted_at
    assert first.ended_at <= second.submitted_at < second.started_at
    assert (first.elapsed_s, second.elapsed_s) == (10, 46)
    assert (first.allocated_gpus, second.allocated_gpus) == (1, 1)
    # Each run's usage is its own steps' (a burn in an srun step and in the batch step,
    # cut short by the requeue in the first run).
    assert (first.cpu_time_s, second.cpu_time_s) == pytest.approx(cpu_s, abs=0.002)
    assert (first.mem_peak_bytes, second.mem_peak_bytes) == tuple(k * 1024 for k in peak_k)
    assert listing.refused == []


@pytest.mark.parametrize(("fixture", "requeued", "forger", "victim", "cpu_s", "peak_k"), REQUEUED)
def test_a_forged_record_in_a_name_and_a_comment_is_a_name_and_a_comment(
    fixture, requeued, forger, victim, cpu_s, peak_k
):
    listing = parse_accounting(recorded(fixture))
    assert sorted({e.job_id for e in listing}) == sorted([requeued, forger])  # no victim
    [job] = [e for e in listing if e.job_id == forger]
    assert (job.user, job.account, job.state) == ("bob", "fixturerec", SlurmJobState.COMPLETED)
    # As the other listings carry them: the first 64 bytes; slurmdbd keeps "?" for bytes
    # that are not UTF-8.
    assert job.name.startswith(f"\n{victim}\x1f{victim}\x1fN/A\x1folga\x1fgenomics")
    assert len(job.name.encode()) == 64
    assert job.comment.startswith("".join(map(chr, range(1, 32))) + "???(??\n")


def _broken(payload: dict, job_id: int, change: dict) -> dict:
    """``payload`` with the first job of ``job_id`` changed (``None`` removes a key)."""
    jobs = [dict(job) for job in payload["jobs"]]
    job = next(job for job in jobs if job["job_id"] == job_id)
    for key, value in change.items():
        if value is None:
            del job[key]
        else:
            job[key] = value
    return {**payload, "jobs": jobs}


@pytest.mark.parametrize(
    ("payload", "broken"),
    [(lambda: recorded("jobs.json"), 1279),
     (lambda: recorded_next("jobs", "v0.0.42"), 2)],
)  # fmt: skip
@pytest.mark.parametrize(
    "change",
    [{"job_state": "NO_SUCH_STATE"}, {"job_state": None}, {"name": ["not", "a", "text"]}],
    ids=["unknown state", "no state", "a name that is a list"],
)
def test_a_queued_job_that_does_not_read_is_refused_with_its_id_and_the_others_read(
    payload, broken, change
):
    whole = parse_queue(payload())
    listing = parse_queue(_broken(payload(), broken, change))
    [refused] = listing.refused
    assert refused.job_id == broken and "cannot read the record" in refused.problem
    assert listing == [entry for entry in whole if entry.job_id != broken]


@pytest.mark.parametrize(
    ("payload", "broken"),
    [(lambda: recorded("accounting.json"), 1284),
     (lambda: recorded_next("accounting", "v0.0.42"), 5)],
)  # fmt: skip
@pytest.mark.parametrize(
    "change",
    [{"state": {"current": "NO_SUCH_STATE"}}, {"state": None}, {"job_id": "5"}],
    ids=["unknown state", "no state", "an id that is a text"],
)
def test_an_accounting_record_that_does_not_read_is_refused_and_the_others_read(
    payload, broken, change
):
    whole = parse_accounting(payload())
    listing = parse_accounting(_broken(payload(), broken, change))
    [refused] = listing.refused
    assert refused.job_id == (None if "job_id" in change else broken)
    assert listing == [entry for entry in whole if entry.job_id != broken]


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
        "no_requeue": True,
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


# --- Slurm 24.11: data parsers v0.0.40-v0.0.42 (fixtures in 24.11/) -------------------------

NEXT = "24.11"
RESHAPED = ["v0.0.40", "v0.0.41", "v0.0.42"]


def recorded_next(name: str, version: str) -> dict:
    return recorded(f"{NEXT}/{name}-{version}.json")


def test_the_newest_of_24_11s_versions_is_chosen_for_slurm_and_slurmdb():
    paths = list(recorded(f"{NEXT}/openapi_paths.json")["paths"])
    assert newest_versions(paths) == ("v0.0.42", "v0.0.42")
    older = [p for p in paths if "v0.0.42" not in p]
    assert newest_versions(older) == ("v0.0.41", "v0.0.41")
    assert newest_versions([p for p in older if "v0.0.41" not in p]) == ("v0.0.40", "v0.0.40")


@pytest.mark.parametrize("version", RESHAPED)
def test_24_11s_queue_reads_as_22_05s(version):
    jobs = {e.job_id: e for e in parse_queue(recorded_next("jobs", version))}
    running = jobs[1]
    assert (running.state, running.user, running.account, running.partition) == (
        SlurmJobState.RUNNING, "alice", "contract", "short",
    )  # fmt: skip
    assert running.comment == "portal:fixture" and running.time_limit_minutes == 5
    assert running.submitted_at == utc(1796317458) == running.started_at
    assert (jobs[2].state, jobs[2].reason, jobs[2].started_at) == (
        SlurmJobState.PENDING, "Dependency", None,
    )  # fmt: skip
    assert jobs[3].reason == "JobHeldUser"
    assert (jobs[4].name, jobs[4].comment) == ('café|na"me', "")
    assert jobs[8].state == SlurmJobState.CANCELLED
    assert (jobs[9].array_job_id, jobs[9].array_task) == (9, "0-3%2")  # a pending array
    assert {(jobs[i].array_job_id, jobs[i].array_task) for i in (10, 11)} == {
        (10, "1"), (10, "0"),
    }  # fmt: skip
    assert jobs[1].array_job_id is None and jobs[1].array_task is None


@pytest.mark.parametrize("version", RESHAPED)
def test_24_11s_accounting_keeps_exit_codes_and_gpus(version):
    entries = {e.job_id: e for e in parse_accounting(recorded_next("accounting", version))}
    assert entries[1].allocated_gpus == 2 and entries[1].allocated_cpus == 1
    assert entries[1].state == SlurmJobState.RUNNING
    # Read without disable_truncate_usage_time, a running job's "end" is now: not an end.
    assert entries[1].ended_at is None and entries[1].started_at == utc(1796317458)
    failed = entries[5]
    assert (failed.state, failed.exit_code, failed.signal) == (SlurmJobState.FAILED, 3, 0)
    assert failed.comment == "portal:fixture"  # ended: the comment is there
    assert (entries[6].state, entries[6].exit_code) == (SlurmJobState.COMPLETED, 0)
    killed = entries[7]
    assert (killed.state, killed.exit_code, killed.signal) == (SlurmJobState.FAILED, 0, 9)
    assert entries[8].state == SlurmJobState.CANCELLED and entries[8].elapsed_s == 10
    assert entries[8].ended_at == utc(1796317482)
    assert {(entries[i].array_job_id, entries[i].array_task) for i in (10, 11)} == {
        (10, "1"), (10, "0"),
    }  # fmt: skip
    assert entries[10].comment == ""  # running: 24.11 stores the comment at the end


def test_24_11s_exit_code_objects():
    signaled = {
        "status": ["SIGNALED"],
        "return_code": {"set": False, "infinite": False, "number": 0},
        "signal": {"id": {"set": True, "infinite": False, "number": 15}, "name": "TERM"},
    }
    assert accounting_exit_code(signaled, SlurmJobState.CANCELLED) == (0, 15)
    error = {"status": ["ERROR"], "return_code": {"set": True, "number": 3}}
    assert accounting_exit_code(error, SlurmJobState.FAILED) == (3, 0)
    assert accounting_exit_code({"status": ["PENDING"]}, SlurmJobState.PENDING) == (None, None)
    queue = {"jobs": [{"job_id": 5, "job_state": ["FAILED"], "exit_code": error}]}
    assert parse_queue_exit_codes(queue) == {5: (3, 0)}


def test_a_state_list_shows_its_telling_flag_as_squeue_does():
    assert job_state(["PENDING", "REQUEUED"]) == SlurmJobState.REQUEUED
    assert job_state(["RUNNING", "COMPLETING"]) == SlurmJobState.COMPLETING
    assert job_state(["PENDING", "LAUNCH_FAILED"]) == SlurmJobState.PENDING
    assert job_state("CANCELLED by 0") == SlurmJobState.CANCELLED


@pytest.mark.parametrize("version", ["v0.0.40", "v0.0.42"])
def test_24_11s_partitions_have_gpus_and_limits_but_no_default(version):
    partitions = {
        p.name: p
        for p in parse_partitions(
            recorded_next("partitions", version), recorded_next("nodes", version)
        )
    }
    batch, short = partitions["batch"], partitions["short"]
    assert (batch.max_time_minutes, short.max_time_minutes) == (7 * 24 * 60, 60)
    assert (short.gpus_per_node, short.gpu_type, short.total_gpus, short.nodes) == (4, "b200", 4, 1)
    assert batch.is_up and short.is_up
    assert not batch.is_default and not short.is_default  # 24.11's REST does not say


@pytest.mark.parametrize("version", ["v0.0.40", "v0.0.42"])
def test_24_11s_associations_read_unset_limits_as_none(version):
    own = next(a for a in recorded_next("associations", version)["associations"] if not a["user"])
    assert (gpu_minutes_limit(own), cpu_minutes_limit(own), max_submit_jobs(own)) == (
        None, None, None,
    )  # fmt: skip
    assert job_count_limits(own) == {"GrpSubmitJobs": None, "GrpJobs": None}


def test_limits_change_in_an_association_that_goes_back_whole():
    own = next(a for a in recorded_next("associations", "v0.0.42")["associations"] if not a["user"])
    own["max"]["tres"]["group"]["minutes"] = [
        {"type": "gres", "name": "gpu", "id": 1001, "count": 77},
        {"type": "mem", "name": "", "id": 2, "count": 5},
    ]
    changed = with_limits(
        own, minutes={"cpu": 7}, jobs={"MaxSubmitJobs": 3, "GrpJobs": 0, "GrpSubmitJobs": None}
    )
    assert (gpu_minutes_limit(changed), cpu_minutes_limit(changed)) == (77, 7)
    assert tres_minutes_limit(changed, {"type": "mem", "name": ""}) == 5  # kept as it was
    assert max_submit_jobs(changed) == 3
    assert job_count_limits(changed) == {"GrpSubmitJobs": None, "GrpJobs": 0}
    assert limits_hold(changed, minutes={"cpu": 7}, jobs={"GrpJobs": 0})
    assert not limits_hold(own, minutes={"cpu": 7})
    cleared = with_limits(changed, minutes={"gres/gpu": None}, jobs={"MaxSubmitJobs": None})
    assert (gpu_minutes_limit(cleared), cpu_minutes_limit(cleared)) == (None, 7)
    assert max_submit_jobs(cleared) is None
    assert (changed["account"], changed["parent_account"]) == (own["account"], "root")
    assert gpu_minutes_limit(own) == 77  # the association read is not changed


@pytest.mark.parametrize("version", ["v0.0.40", "v0.0.42"])
def test_usage_is_read_from_shares_in_whole_minutes(version):
    payload = recorded_next("shares", version)
    # contract's cpu usage is 10.999884 cpu-seconds: sshare's GrpTRESRaw says cpu=0.
    assert minutes_used(payload, "contract") == MinutesUsed(
        gpu=0, cpu=0, share=0.5, usage=0.0, users_gpu={"alice": 0}, users_cpu={"alice": 0}
    )
    share = next(s for s in payload["shares"]["shares"] if s["name"] == "contract")
    for item in share["tres"]["usage"]:
        item["value"] = {"cpu": 7260.5, "gres/gpu": 119.9}.get(item["name"], item["value"])
    # A member's own usage (their share is of type USER, the account its parent).
    alice = next(s for s in payload["shares"]["shares"] if s["name"] == "alice")
    for item in alice["tres"]["usage"]:
        item["value"] = {"gres/gpu": 180.0, "cpu": 600.0}.get(item["name"], item["value"])
    assert minutes_used(payload, "contract") == MinutesUsed(
        gpu=1, cpu=121, share=0.5, usage=0.0, users_gpu={"alice": 3}, users_cpu={"alice": 10}
    )
    assert minutes_used(payload, "alice") is None  # a user's share is not an account's
    assert minutes_used(payload, "no-such-account") is None


def test_24_11s_submit_answers():
    for version in ("v0.0.40", "v0.0.42"):
        held = recorded_next("submit_held", version)
        assert submitted_job_id(held) and not error_codes(held)  # held: a warning only
    refused = recorded_next("submit_refused_account", "v0.0.42")
    assert submitted_job_id(refused) is None
    error = error_for(refused, where=WHERE)
    assert isinstance(error, SlurmRejected) and "Invalid account" in error.message
    for name in ("submit_refused_gpus", "submit_refused_time"):
        assert isinstance(error_for(recorded_next(name, "v0.0.42"), where=WHERE), SlurmRejected)
    token = recorded_next("diag_token_refused", "v0.0.42")
    assert "refused the portal's token" in str(error_for(token, where=WHERE))


def test_24_11s_cancellations_say_in_a_status_what_slurmctld_refused():
    assert isinstance(error_for(recorded_next("cancel_unknown", "v0.0.42"), where=WHERE), NotFound)
    unknown = recorded_next("cancel_unknown_small_id", "v0.0.42")
    assert not error_codes(unknown) and cancel_outcome(unknown) == {2017}
    assert "Invalid job id" in cancel_message(unknown)
    assert cancel_outcome(recorded_next("cancel_unknown_small_id", "v0.0.40")) == set()
    assert cancel_outcome(recorded_next("cancel_ended", "v0.0.42")) == {2017}


def test_nothing_found_is_a_warning_in_24_11_not_an_error():
    for name in ("associations_nothing_found", "accounting_job_nothing_found"):
        payload = recorded_next(name, "v0.0.42")
        assert not error_codes(payload) and payload["warnings"]


def test_a_24_11_job_description_uses_its_own_keys():
    wanted = request(
        gpus_per_node=2, cpus_per_gpu=4, mem_per_gpu_mb=16_000, nodes=2,
        environment={"FOO": "bar baz"}, array="0-9%2", after_ok=(11,), comment="portal:abc",
    )  # fmt: skip
    for version in RESHAPED:
        body = submit_body(wanted, version)
        assert set(body) == {"job"}
        job = body["job"]
        assert job["script"] == wanted.script
        assert job["environment"] == ["FOO=bar baz"]
        assert job["time_limit"] == {"set": True, "infinite": False, "number": 30}
        assert job["nodes"] == "2"
        assert job["tres_per_node"] == "gres/gpu=2"
        assert (job["cpus_per_tres"], job["memory_per_tres"]) == ("gres/gpu:4", "gres/gpu:16000")
        assert not {"gpus_per_node", "cpus_per_gpu", "memory_per_gpu"} & set(job)
        assert (job["array"], job["dependency"]) == ("0-9%2", "afterok:11")
    plain = submit_body(request(), "v0.0.42")["job"]
    assert plain["environment"] == ["SLURM_JOB_NAME=train"]
    assert not {"tres_per_node", "cpus_per_tres", "array", "dependency"} & set(plain)
    assert submit_body(request(), "v0.0.38")["script"] == "#!/bin/bash\ntrue\n"


# --- usage, from the steps (accounting_steps*.json: read without skip_steps) -----------
# Jobs read through slurmrestd on 2026-12-04 while sacct read them too (the cli recordings
# of then, since recorded again: ../cli/README.md): the job's own time.total is 0 there,
# so its CPU time is its steps'; 28 and 3 were never sampled.

STEPS_FIXTURES = [
    ("accounting_steps.json", 28, 39),
    *((f"{NEXT}/accounting_steps-{version}.json", 3, 15) for version in RESHAPED),
]


@pytest.mark.parametrize(("fixture", "short", "sampled"), STEPS_FIXTURES)
def test_accounting_folds_the_steps_usage_as_sacct_does(fixture, short, sampled):
    jobs = {entry.job_id: entry for entry in parse_accounting(recorded(fixture))}
    assert set(jobs) == {short, sampled}
    for job in jobs.values():
        assert job.time_limit_minutes == 5
        assert job.mem_allocated_bytes == 500 * 2**20
        assert job.gpu_util_percent is None and job.gpu_mem_peak_bytes is None  # fake GPUs
        assert job.cpu_time_s > 1.5  # each burnt a CPU for about 2 s or more
    assert jobs[short].mem_peak_bytes is None
    # What sacct printed for the same job (12460K, 13328K), to the byte.
    assert jobs[sampled].mem_peak_bytes == {39: 12460, 15: 13328}[sampled] * 1024
    # sacct prints TotalCPU to the millisecond, cut off: 5.287 there, 5.288 here.
    expected_cpu = {28: 1.782, 39: 5.287, 3: 2.327, 15: 5.619}
    for job in jobs.values():
        assert job.cpu_time_s == pytest.approx(expected_cpu[job.job_id], abs=0.002)


def test_a_steps_usage_reads_gpu_figures_where_nvml_records_them():
    step = {
        "time": {"total": {"seconds": 1, "microseconds": 1405304}},
        "tres": {
            "requested": {
                "max": [{"type": "mem", "count": 2048},
                        {"type": "gres", "name": "gpumem", "count": 4096}],
                "average": [{"type": "gres", "name": "gpuutil", "count": 0}],
            }
        },
    }  # fmt: skip
    usage = step_usage(step)
    assert usage.cpu_time_s == pytest.approx(2.405304)  # 22.05's microseconds past a million
    assert (usage.mem_peak_bytes, usage.gpu_mem_peak_bytes) == (2048, 4096)
    assert usage.gpu_util_percent == 0.0  # a recorded idle GPU is 0; unrecorded is None
    assert step_usage({}).gpu_util_percent is None
