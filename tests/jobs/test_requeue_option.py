"""A portal job is submitted --no-requeue unless its request or its template asks for
requeue: the API, a template's default, the composer, the rendered script, the estimate and
the submission all carry ``requeue``; and real Slurm (22.05 and 24.11, both adapters)
keeps the job from being run again, so its owner's ``scontrol requeue`` is refused.

Most tests need no Slurm: their cluster is offline and nothing they create is submitted
(the test's transaction never commits). The last ones submit held jobs to both clusters."""

import re
import subprocess

import pytest
from django.core.cache import cache
from django.test import Client

from accounts.services import membership_set
from accounts.tokens import token_create
from clusters.slurm import client_for
from clusters.slurm.cli import CliClient, sbatch_arguments
from jobs.errors import JobInvalid
from jobs.models import Job, JobTemplate
from jobs.services import job_create, job_template_check, job_template_create
from jobs.states import JobState
from jobs.submission import job_submit, spec_of, submit_request
from tests.conftest import through_slurmrestd
from tests.factories import request_for
from tests.security.conftest import funded_project, offline_cluster_create, person

NO_REQUEUE = "#SBATCH --no-requeue"
REQUEUE = "#SBATCH --requeue"


def directives(script: str) -> list[str]:
    return [line for line in script.split("\n") if line in (NO_REQUEUE, REQUEUE)]


@pytest.fixture(autouse=True)
def _no_throttling(settings):
    settings.API_RATE = None
    settings.API_ANON_RATE = None


@pytest.fixture
def researcher(db):
    return person("requeue-alice", posix="alice")


@pytest.fixture
def outsider(db):
    return person("requeue-charlie", posix="charlie")


@pytest.fixture
def project(researcher):
    return funded_project(
        "requeue-alpha", cluster=offline_cluster_create(), members={researcher: "member"}
    )


def api(user) -> Client:
    _, plain = token_create(user=user, name="tests")
    return Client(headers={"Authorization": f"Bearer {plain}"})


def post(client: Client, path: str, body: dict, **headers) -> dict:
    response = client.post(path, body, content_type="application/json", headers=headers)
    return {"status": response.status_code, **response.json()}


@pytest.fixture
def body(project) -> dict:
    return {
        "project": project.slug,
        "partition": "debug",
        "name": "train",
        "gpus_per_node": 1,
        "time_limit_minutes": 30,
        "script": "python train.py\n",
    }


@pytest.fixture
def requeue_template(researcher) -> JobTemplate:
    return job_template_create(
        user=researcher,
        name="preemptible",
        script="python train.py --resume\n",
        defaults={"requeue": True, "time_limit_minutes": 20},
    )


# --- the API -------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_job_asks_for_no_requeue_unless_its_request_does(researcher, body):
    client = api(researcher)
    plain = post(client, "/api/v1/jobs/", body)
    asked = post(client, "/api/v1/jobs/", {**body, "requeue": True})
    assert plain["status"] == asked["status"] == 201
    assert (plain["requeue"], asked["requeue"]) == (False, True)
    assert directives(plain["rendered_script"]) == [NO_REQUEUE]
    assert directives(asked["rendered_script"]) == [REQUEUE]
    rows = {job.pk: job.requeue for job in Job.objects.all()}
    assert rows == {plain["id"]: False, asked["id"]: True}
    # The list (built from rows, not objects) and the detail say the same.
    listed = {job["id"]: job["requeue"] for job in client.get("/api/v1/jobs/").json()["results"]}
    assert listed == rows
    assert client.get(f"/api/v1/jobs/{asked['id']}/").json()["requeue"] is True


@pytest.mark.django_db
def test_requeue_must_be_a_boolean(researcher, body):
    refused = post(api(researcher), "/api/v1/jobs/", {**body, "requeue": "sometimes"})
    assert refused["status"] == 400
    assert "requeue" in refused["error"]["fields"]
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_the_estimate_shows_the_directive_and_prices_both_alike(researcher, body):
    client = api(researcher)
    plain = post(client, "/api/v1/jobs/estimate/", body)
    asked = post(client, "/api/v1/jobs/estimate/", {**body, "requeue": True})
    assert plain["status"] == asked["status"] == 200
    assert directives(plain["rendered_script"]) == [NO_REQUEUE]
    assert directives(asked["rendered_script"]) == [REQUEUE]
    # One run's price either way (a GPU for half an hour and its CPU); each run is charged.
    assert plain["requested_gpu_hours"] == asked["requested_gpu_hours"] == 0.505
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_repeat_with_the_same_key_compares_requeue_too(researcher, body):
    client, key = api(researcher), "requeue-key-1"
    first = post(client, "/api/v1/jobs/", {**body, "requeue": True}, **{"Idempotency-Key": key})
    cache.clear()  # the day the body's fingerprint is kept has passed: the job's fields decide
    same = post(client, "/api/v1/jobs/", {**body, "requeue": True}, **{"Idempotency-Key": key})
    cache.clear()
    other = post(client, "/api/v1/jobs/", {**body, "requeue": False}, **{"Idempotency-Key": key})
    assert first["status"] == same["status"] == 201 and same["id"] == first["id"]
    assert other["status"] == 409
    assert Job.objects.count() == 1


# --- templates -------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_templates_default_asks_for_requeue_and_a_request_may_say_no(
    researcher, body, requeue_template
):
    client = api(researcher)
    del body["script"], body["time_limit_minutes"]
    body["template"] = requeue_template.pk
    from_template = post(client, "/api/v1/jobs/", body)
    said_no = post(client, "/api/v1/jobs/", {**body, "requeue": False})
    assert from_template["status"] == said_no["status"] == 201
    assert from_template["requeue"] is True and from_template["time_limit_minutes"] == 20
    assert directives(from_template["rendered_script"]) == [REQUEUE]
    assert said_no["requeue"] is False
    assert directives(said_no["rendered_script"]) == [NO_REQUEUE]
    assert Job.objects.get(pk=from_template["id"]).requeue is True


@pytest.mark.django_db
def test_the_api_saves_a_templates_requeue_as_a_boolean(researcher):
    client = api(researcher)
    made = post(
        client, "/api/v1/templates/", {"name": "t", "script": "t\n", "defaults": {"requeue": True}}
    )
    refused = post(
        client,
        "/api/v1/templates/",
        {"name": "u", "script": "t\n", "defaults": {"requeue": "yes please"}},
    )
    assert made["status"] == 201 and made["defaults"] == {"requeue": True}
    assert refused["status"] == 400 and "defaults.requeue" in refused["error"]["fields"]
    assert JobTemplate.objects.filter(owner=researcher).count() == 1


@pytest.mark.django_db
def test_a_template_typed_by_hand_must_say_requeue_as_true_or_false():
    # The admin console's JSON: checked by the service every save goes through.
    with pytest.raises(JobInvalid) as refused:
        job_template_check(name="t", script="t\n", defaults={"requeue": "true"})
    assert list(refused.value.fields) == ["defaults"]
    job_template_check(name="t", script="t\n", defaults={"requeue": False})


@pytest.mark.django_db
def test_an_outsider_cannot_take_requeue_from_someone_elses_template(
    outsider, project, body, requeue_template
):
    membership_set(project=project, user=outsider, role="member")
    refused = post(api(outsider), "/api/v1/jobs/", {**body, "template": requeue_template.pk})
    assert refused["status"] == 400 and "template" in refused["error"]["fields"]
    assert not Job.objects.exists()


# --- the composer ----------------------------------------------------------------------


def composer_form(project, **changes) -> dict:
    return {
        "project": project.slug, "template": "", "partition": "debug", "name": "job",
        "nodes": "1", "gpus_per_node": "1", "cpus_per_gpu": "", "mem_per_gpu_gb": "",
        "time_limit_minutes": "60", "working_directory": "", "output_path": "",
        "error_path": "", "array": "", "environment": "", "requeue": "",
        "script": "echo hi\n", **changes,
    }  # fmt: skip


def hidden_requeue(html: str) -> str | None:
    """The value of the composer's hidden requeue field (None: no value)."""
    match = re.search(r'<input type="hidden" name="requeue"([^>]*)>', html)
    assert match, "the composer has no requeue field"
    value = re.search(r'value="([^"]*)"', match[1])
    return value[1] if value else None


@pytest.mark.django_db
def test_the_composer_carries_a_templates_requeue_into_the_script_and_the_job(
    client, researcher, project, requeue_template
):
    client.force_login(researcher)
    assert hidden_requeue(client.get("/jobs/new/").content.decode()) is None
    page = client.get(f"/jobs/new/?template={requeue_template.pk}").content.decode()
    assert hidden_requeue(page) == "True"
    form = composer_form(project, template=str(requeue_template.pk), requeue="True")
    preview = client.post("/jobs/new/preview/", form).content.decode()
    assert REQUEUE in preview and NO_REQUEUE not in preview
    plain = client.post("/jobs/new/preview/", composer_form(project)).content.decode()
    assert NO_REQUEUE in plain and REQUEUE + "\n" not in plain
    assert client.post("/jobs/new/", form).status_code == 302
    assert Job.objects.get().requeue is True


@pytest.mark.django_db
def test_a_template_saved_from_the_composer_keeps_requeue(
    client, researcher, project, requeue_template
):
    client.force_login(researcher)
    form = composer_form(project, template=str(requeue_template.pk), requeue="True")
    saved = client.post("/jobs/new/save-template/", {**form, "title": "again"})
    assert saved.status_code == 302
    assert JobTemplate.objects.get(name="again").defaults["requeue"] is True


@pytest.mark.django_db
def test_a_template_with_a_requeue_that_is_not_a_boolean_is_refused_where_it_shows(
    client, researcher, project
):
    # Written before its defaults were checked (or by SQL): the field is hidden, so the
    # composer says it beside the form instead.
    broken = JobTemplate.objects.create(
        name="old", scope="user", owner=researcher, defaults={"requeue": "yes"}, script="t\n"
    )
    client.force_login(researcher)
    response = client.post("/jobs/new/", composer_form(project, template=str(broken.pk)))
    assert response.status_code == 400
    assert "Requeue is true or false, not &#x27;yes&#x27;." in response.content.decode()
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_submitting_a_job_again_from_the_composer_keeps_its_requeue(
    client, researcher, project, requeue_template
):
    job = job_create(
        user=researcher,
        request=request_for(project, "/home/alice", template=requeue_template.pk),
    )
    client.force_login(researcher)
    again = client.get(f"/jobs/new/?from={job.pk}").content.decode()
    assert hidden_requeue(again) == "True"


# --- the submission --------------------------------------------------------------------


@pytest.mark.django_db
def test_the_worker_tells_sbatch_what_the_saved_job_says(researcher, project, requeue_template):
    plain = job_create(user=researcher, request=request_for(project, "/home/alice"))
    asked = job_create(
        user=researcher, request=request_for(project, "/home/alice", template=requeue_template.pk)
    )
    for job, flag in ((plain, "--no-requeue"), (asked, "--requeue")):
        request = submit_request(spec=spec_of(job), posix_user="alice", script=job.rendered_script)
        assert request.requeue is job.requeue
        said = [a for a in sbatch_arguments(request) if a in ("--requeue", "--no-requeue")]
        assert said == [flag]


# --- real Slurm ---------------------------------------------------------------------------


def requeue_shown(tools: CliClient, slurm_job_id: int) -> str:
    shown = subprocess.run(
        tools.command(["scontrol", "show", "job", str(slurm_job_id)]),
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    found = re.search(r"\bRequeue=(\d)", shown)
    assert found, shown
    return found[1]


def submitted_and_held(job: Job, tools: CliClient) -> int:
    job_submit(job_id=job.pk)
    job.refresh_from_db()
    assert job.state == JobState.PENDING and job.slurm_job_id, job.submit_error
    # Held at once, so it takes no GPU for long; what follows holds for a running job too.
    subprocess.run(tools.command(["scontrol", "hold", str(job.slurm_job_id)]), check=False)
    return job.slurm_job_id


def check_requeue_on(cluster, *, project, owner, workdir, backend: str, partition: str) -> None:
    tools = client_for(cluster)  # the cluster's own tools, as the worker runs them
    assert isinstance(tools, CliClient)
    template = job_template_create(
        user=owner, name="requeue", script="sleep 60\n", defaults={"requeue": True}
    )
    if backend == "rest":
        through_slurmrestd(cluster)
    base = {"partition": partition, "script": "sleep 60\n", "time_limit_minutes": 2}
    plain = job_create(user=owner, request=request_for(project, workdir, **base))
    asked = job_create(
        user=owner, request=request_for(project, workdir, **base, template=template.pk)
    )
    ids = [submitted_and_held(plain, tools), submitted_and_held(asked, tools)]
    try:
        assert requeue_shown(tools, ids[0]) == "0"
        requeue = subprocess.run(
            tools.command(["scontrol", "requeue", str(ids[0])], as_user="alice"),
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        # Refused for being --no-requeue, not for pending ("Job is pending execution").
        assert requeue.returncode != 0
        assert "presently disabled" in requeue.stderr, requeue.stderr
        assert requeue_shown(tools, ids[1]) == "1"
    finally:
        subprocess.run(tools.command(["scancel", *map(str, ids)]), check=False)


@pytest.mark.slurm
@pytest.mark.parametrize("backend", ["cli", "rest"])
def test_on_portal_dev_only_a_job_whose_template_asks_may_be_requeued(
    make_project, dev_cluster, alice, workdir, backend
):
    project = make_project(members={alice: "pi"}, gpu_hours=10)
    check_requeue_on(
        dev_cluster, project=project, owner=alice, workdir=workdir, backend=backend,
        partition="debug",
    )  # fmt: skip


@pytest.mark.slurm
@pytest.mark.parametrize("backend", ["cli", "rest"])
def test_on_portal_next_only_a_job_whose_template_asks_may_be_requeued(
    make_project, next_cluster, alice, workdir, backend
):
    project = make_project(members={alice: "pi"}, gpu_hours=10, clusters=(next_cluster,))
    check_requeue_on(
        next_cluster, project=project, owner=alice, workdir=workdir, backend=backend,
        partition="short",
    )  # fmt: skip
