"""POST jobs/ (with Idempotency-Key) and POST jobs/estimate/: checked by the services,
refused with the fields to fix or the numbers of a quota, held and saved once."""

import pytest
from django.core.cache import cache
from django.test import override_settings
from redis.exceptions import RedisError

from accounts.models import LedgerEntry
from accounts.selectors import project_balance
from jobs.models import Job, JobTemplate
from tests.api.conftest import error_of, new_key

pytestmark = pytest.mark.slurm

JOB_FIELDS = {
    "id", "state", "slurm_job_id", "slurm_state", "reason", "exit_code",
    "requested_gpu_hours", "used_gpu_hours", "created_at", "submitted_at", "started_at",
    "ended_at", "rendered_script", "owner", "events",
    "project", "cluster", "partition", "name", "nodes", "gpus_per_node", "cpus_per_gpu",
    "mem_per_gpu_gb", "time_limit_minutes", "working_directory", "environment", "array",
    "depends_on", "script", "template", "output_path", "error_path",
}  # fmt: skip


@pytest.fixture
def body(project, workdir):
    return {
        "project": project.slug,
        "partition": "debug",
        "name": "train",
        "gpus_per_node": 2,
        "cpus_per_gpu": 2,
        "mem_per_gpu_gb": 4,
        "time_limit_minutes": 30,
        "working_directory": str(workdir),
        "environment": {"EPOCHS": "3"},
        "script": "echo hello\n",
    }


def post(client, body, **headers):
    return client.post("/api/v1/jobs/", body, content_type="application/json", headers=headers)


def held_hours(project) -> float:
    return project_balance(project).as_gpu_hours()["held_gpu_hours"]


def test_it_creates_the_job_holds_its_hours_and_enqueues_it(
    api, alice, project, body, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        response = post(api(alice), body)
    assert response.status_code == 201, response.json()
    job = response.json()
    assert set(job) >= JOB_FIELDS
    assert job["state"] == "new" and job["owner"] == "alice" and job["project"] == project.slug
    assert job["cluster"] == "portal-dev" and job["partition"] == "debug"
    # 2 GPUs for 30 minutes, and their 4 CPUs at 0.01 GPU-hours a CPU-hour.
    assert job["requested_gpu_hours"] == 1.02
    assert job["environment"] == {"EPOCHS": "3"}
    assert job["nodes"] == 1 and job["depends_on"] == [] and job["template"] is None
    assert "#SBATCH --gpus-per-node=2" in job["rendered_script"]
    assert [e["state"] for e in job["events"]] == ["new"]
    assert set(job["events"][0]) == {"at", "state", "detail"}
    saved = Job.objects.get(pk=job["id"])
    assert saved.owner == alice and saved.cpus_per_gpu == 2
    assert held_hours(project) == 1.02
    assert len(callbacks) == 1  # the submission, once the transaction commits


def test_the_201_is_the_job_as_its_page_shows_it_without_reading_it_back(
    api, alice, project, body, django_assert_max_num_queries
):
    client = api(alice)
    first = post(client, body).json()
    second = post(client, body).json()
    # The caller, the project, cluster, partition and allocation, the caller's queued jobs
    # (MaxSubmitJobs), the dependencies, the job with its links, whether the hold exists
    # already and whether the allocation caps its members (one query), the hold and the
    # first event; nothing read back to answer.
    with django_assert_max_num_queries(16):
        response = post(client, {**body, "depends_on": [first["id"], second["id"]]})
    assert response.status_code == 201, response.json()
    created = response.json()
    assert created["depends_on"] == [second["id"], first["id"]]  # newest first, as read
    assert created == client.get(f"/api/v1/jobs/{created['id']}/").json()


def test_fields_left_out_take_the_templates_values(api, alice, project, body):
    template = JobTemplate.objects.create(
        name="long", scope="user", owner=alice, defaults={"time_limit_minutes": 45}, script="t\n"
    )
    del body["time_limit_minutes"], body["script"]
    job = post(api(alice), {**body, "template": template.pk}).json()
    assert job["time_limit_minutes"] == 45 and job["script"] == "t\n"
    assert job["template"] == template.pk


def test_an_invalid_request_names_each_field_and_saves_nothing(api, alice, project, body):
    response = post(
        api(alice),
        {**body, "name": "a b", "script": "#SBATCH --gres=gpu:8\n", "time_limit_minutes": 61},
    )
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid"
    assert {"name", "script", "time_limit_minutes"} <= set(error["fields"])
    assert all(error["fields"][name] for name in error["fields"])
    assert not Job.objects.exists() and held_hours(project) == 0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"nodes": "many"}, "nodes"),
        ({"environment": ["A=1"]}, "environment"),
        ({"environment": {"A": ["1"]}}, "environment.A"),
        ({"depends_on": "3"}, "depends_on"),
        ({"depends_on": [0]}, "depends_on.0"),
        ({"template": "first"}, "template"),
        ({"script": {"body": "x"}}, "script"),
    ],
)
def test_a_value_of_the_wrong_type_is_a_400_on_its_field(api, alice, project, body, change, field):
    response = post(api(alice), {**body, **change})
    assert response.status_code == 400
    assert field in error_of(response)["fields"]
    assert not Job.objects.exists()


def test_an_outsider_cannot_charge_the_project(api, charlie, project, body):
    response = post(api(charlie), body)
    assert response.status_code == 400
    assert "not a member" in error_of(response)["fields"]["project"][0]
    assert not Job.objects.exists()


def test_a_job_over_budget_is_a_409_with_both_numbers(api, alice, project, body):
    # 10 GPU-hours granted; 2 GPUs (and 4 CPUs) for 6 hours on gpu (7 days allowed)
    # need 12 + 0.24.
    response = post(api(alice), {**body, "partition": "gpu", "time_limit_minutes": 360})
    assert response.status_code == 409
    error = error_of(response)
    assert error["code"] == "quota_exceeded"
    assert error["requested_gpu_hours"] == 12.24
    assert error["available_gpu_hours"] == 10.0
    assert "12.24" in error["message"]
    assert not Job.objects.exists() and held_hours(project) == 0


def test_an_array_over_max_submit_jobs_is_a_400_naming_the_limit_and_its_size(
    api, alice, project, body
):
    # Slurm would refuse it (AssocMaxSubmitJobLimit): it could only end submit_failed.
    client = api(alice)
    with override_settings(SLURM_MAX_SUBMIT_JOBS=8):
        response = post(client, {**body, "array": "0-9"})
        estimate = client.post(
            "/api/v1/jobs/estimate/", {**body, "array": "0-9"}, content_type="application/json"
        )
    assert response.status_code == estimate.status_code == 400
    [message] = error_of(response)["fields"]["array"]
    assert "10 tasks" in message and "at most 8 jobs" in message and "MaxSubmitJobs" in message
    assert error_of(estimate)["fields"]["array"] == [message]
    assert not Job.objects.exists() and held_hours(project) == 0


def test_the_callers_unfinished_jobs_count_against_max_submit_jobs(api, alice, project, body):
    client = api(alice)
    small = {**body, "gpus_per_node": 1, "cpus_per_gpu": 1, "time_limit_minutes": 5}
    with override_settings(SLURM_MAX_SUBMIT_JOBS=8):
        first = post(client, {**small, "array": "0-5"})
        assert first.status_code == 201
        refused = post(client, {**small, "array": "0-2"})
        assert refused.status_code == 400
        [message] = error_of(refused)["fields"]["array"]
        assert "You have 6 jobs queued or running" in message and "adds 3" in message
        assert "at most 8" in message
        assert post(client, {**small, "array": "0-1"}).status_code == 201  # 6 + 2 = 8
        refused = post(client, small)  # a single job: the error is the form's own
        assert "__all__" in error_of(refused)["fields"]
        # An ended job no longer counts.
        assert client.post(f"/api/v1/jobs/{first.json()['id']}/cancel/").status_code == 202
        assert post(client, {**small, "array": "0-5"}).status_code == 201
    assert Job.objects.filter(state="new").count() == 2


def test_anonymous_cannot_create_jobs(anonymous, body):
    assert post(anonymous, body).status_code == 401


# Idempotency-Key.


def test_a_repeat_with_the_same_key_and_body_returns_the_first_job_once(api, alice, project, body):
    client, key = api(alice), new_key()
    first = post(client, body, **{"Idempotency-Key": key})
    again = post(client, body, **{"Idempotency-Key": key})
    assert first.status_code == again.status_code == 201
    assert again.json()["id"] == first.json()["id"]
    assert again["Idempotent-Replayed"] == "true"
    assert Job.objects.count() == 1
    assert LedgerEntry.objects.filter(kind="hold").count() == 1
    assert held_hours(project) == 1.02


def test_null_and_left_out_are_the_same_body(api, alice, project, body):
    client, key = api(alice), new_key()
    first = post(client, body, **{"Idempotency-Key": key})
    again = post(client, {**body, "array": None}, **{"Idempotency-Key": key})
    assert again.status_code == 201 and again.json()["id"] == first.json()["id"]


def test_the_same_key_with_another_body_is_a_409(api, alice, project, body):
    client, key = api(alice), new_key()
    post(client, body, **{"Idempotency-Key": key})
    response = post(client, {**body, "gpus_per_node": 1}, **{"Idempotency-Key": key})
    assert response.status_code == 409
    assert error_of(response)["code"] == "idempotency_conflict"
    assert Job.objects.count() == 1


def test_without_the_cached_body_the_jobs_fields_decide(api, alice, project, body, workdir):
    client, key = api(alice), new_key()
    first = post(client, {**body, "output_path": "out-%j.log"}, **{"Idempotency-Key": key})
    cache.clear()  # the day the fingerprint is kept has passed
    same = post(client, {**body, "output_path": "out-%j.log"}, **{"Idempotency-Key": key})
    assert same.status_code == 201 and same.json()["id"] == first.json()["id"]
    cache.clear()
    other = post(client, {**body, "output_path": "other.log"}, **{"Idempotency-Key": key})
    assert other.status_code == 409
    assert error_of(other)["code"] == "idempotency_conflict"


def test_keys_are_per_user(api, alice, pat, project, body):
    key = new_key()
    mine = post(api(alice), body, **{"Idempotency-Key": key})
    del body["working_directory"]  # alice's; pat's jobs run in his home
    theirs = post(api(pat), body, **{"Idempotency-Key": key})
    assert theirs.status_code == 201 and theirs.json()["id"] != mine.json()["id"]


def test_a_refused_request_leaves_the_key_free(api, alice, project, body):
    client, key = api(alice), new_key()
    refused = post(client, {**body, "name": "a b"}, **{"Idempotency-Key": key})
    assert refused.status_code == 400
    fixed = post(client, body, **{"Idempotency-Key": key})
    assert fixed.status_code == 201


def test_a_key_that_is_not_visible_ascii_is_a_400(api, alice, project, body):
    response = post(api(alice), body, **{"Idempotency-Key": "x" * 201})
    assert response.status_code == 400
    assert "Idempotency-Key" in error_of(response)["fields"]
    assert not Job.objects.exists()


# Estimate.


def test_the_estimate_prices_the_job_and_saves_nothing(api, alice, project, body):
    response = api(alice).post("/api/v1/jobs/estimate/", body, content_type="application/json")
    assert response.status_code == 200
    estimate = response.json()
    assert set(estimate) == {
        "requested_gpu_hours",
        "available_gpu_hours",
        "fits",
        "expected_start",
        "rendered_script",
        "cluster_unreachable",
        "gpu_hours",
        "billing_weight",
        "gpu_part_gpu_hours",
        "cpu_hours",
        "cpu_hour_rate",
        "cpu_part_gpu_hours",
        "member_remaining_gpu_hours",
    }
    assert estimate["member_remaining_gpu_hours"] is None  # alice has no cap
    assert estimate["requested_gpu_hours"] == 1.02
    # The breakdown: 1 GPU-hour at weight 1, plus 2 CPU-hours (4 CPUs for 30 minutes) at 0.01.
    assert (estimate["gpu_hours"], estimate["billing_weight"]) == (1.0, 1.0)
    assert (estimate["cpu_hours"], estimate["cpu_hour_rate"]) == (2.0, 0.01)
    assert estimate["gpu_part_gpu_hours"] == 1.0
    assert estimate["cpu_part_gpu_hours"] == pytest.approx(0.02)
    assert estimate["available_gpu_hours"] == 10.0
    assert estimate["fits"] is True
    assert "echo hello" in estimate["rendered_script"]
    assert not Job.objects.exists() and held_hours(project) == 0


def test_the_estimate_says_when_a_job_does_not_fit(api, alice, project, body):
    over = {**body, "partition": "gpu", "time_limit_minutes": 360}
    estimate = api(alice).post("/api/v1/jobs/estimate/", over, content_type="application/json")
    assert estimate.status_code == 200
    assert estimate.json()["fits"] is False
    assert estimate.json()["requested_gpu_hours"] == 12.24


def test_an_invalid_estimate_is_a_400(api, alice, project, body):
    response = api(alice).post(
        "/api/v1/jobs/estimate/", {**body, "array": "0-3;ls"}, content_type="application/json"
    )
    assert response.status_code == 400
    assert "array" in error_of(response)["fields"]


UNREACHABLE_CACHE = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": "redis://127.0.0.1:9/0",  # nothing listens: refused at once
    }
}


def test_with_the_cache_down_a_repeat_still_makes_one_job(api, alice, project, body, settings):
    settings.CACHES = UNREACHABLE_CACHE
    with pytest.raises(RedisError):
        cache.get("anything")
    client, key = api(alice), new_key()
    first = post(client, body, **{"Idempotency-Key": key})
    again = post(client, body, **{"Idempotency-Key": key})
    other = post(client, {**body, "name": "other"}, **{"Idempotency-Key": key})
    assert first.status_code == again.status_code == 201
    assert again.json()["id"] == first.json()["id"]
    assert other.status_code == 409  # the job's own fields decided
    assert Job.objects.count() == 1
