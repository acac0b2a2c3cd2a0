"""Secrets stay where they are: never in a job's environment, never in the logs.

A job's environment is its owner's and the form's (--export=NONE plus HOME, USER,
LOGNAME, PATH), whatever the worker that submitted it holds; an access token is
never written to a log, not when it works and not when it is refused.
"""

import logging
import re
import secrets

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from accounts.tokens import token_create, token_revoke
from jobs.models import Job
from jobs.selectors import job_output
from jobs.services import job_create
from jobs.states import JobState
from tests.conftest import REPO, running_worker
from tests.factories import request_for, run_to_the_end, wait_for

# What Slurm itself and the shell add to every batch job; the names only, checked
# below to carry none of the worker's values.
SLURM_ADDED = re.compile(
    r"SLURM_\w+|SLURMD_\w+|ENVIRONMENT|HOSTNAME|SHELL|MAIL|PWD|OLDPWD|SHLVL|_|TMPDIR|"
    r"CUDA_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL|ROCR_VISIBLE_DEVICES|ZE_AFFINITY_MASK|"
    r"OMPI_MCA_\w+|PMIX_\w+|PMI_\w+"
)


def environment_of(text: str) -> dict[str, str]:
    lines = (line.partition("=") for line in text.splitlines() if "=" in line)
    return {name: value for name, _, value in lines if re.fullmatch(r"[A-Za-z_]\w*", name)}


@pytest.mark.slurm
@pytest.mark.django_db(transaction=True)
def test_a_job_sees_none_of_the_workers_secrets(make_project, alice, workdir):
    db = connection.settings_dict
    secret = {
        "PORTAL_SECRET_KEY": secrets.token_urlsafe(40),
        "PORTAL_SLURM_JWT": "eyJ" + secrets.token_urlsafe(40),
        "PORTAL_EMAIL_HOST_PASSWORD": secrets.token_urlsafe(20),
        # The real ones: the worker must connect with them.
        "DATABASE_PASSWORD": settings.DATABASE_PASSWORD,
        "REDIS_PASSWORD": settings.REDIS_PASSWORD,
    }
    worker_env = {
        "PORTAL_SECRET_KEY": secret["PORTAL_SECRET_KEY"],
        "PORTAL_SLURM_JWT": secret["PORTAL_SLURM_JWT"],
        "PORTAL_EMAIL_HOST_PASSWORD": secret["PORTAL_EMAIL_HOST_PASSWORD"],
        "PORTAL_DATABASE_URL": f"postgresql://{db['USER']}:{secret['DATABASE_PASSWORD']}"
        f"@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "PORTAL_REDIS_PASSWORD": secret["REDIS_PASSWORD"],
        # Worker variables that would change a job if they reached sbatch or the job.
        "SLURM_CONF": "/worker-only/slurm.conf",
        "SBATCH_ACCOUNT": "worker-only-account",
        "WORKER_ONLY_MARKER": "worker-only-value",
        "SHELL": "/worker-only/sh",
        "MAIL": "/worker-only/mail",
    }
    project = make_project(members={alice: "pi"}, gpu_hours=10)
    with running_worker(**worker_env) as (queue, _, _process):
        job = job_create(
            user=alice,
            request=request_for(
                project, workdir, gpus_per_node=0, environment={"EPOCHS": "3"}, script="env\n"
            ),
        )
        wait_for(lambda: Job.objects.get(pk=job.pk).slurm_job_id, what="the worker to submit")
        run_to_the_end(job)
    assert job.state == JobState.COMPLETED
    output = job_output(job).text
    environment = environment_of(output)

    # What the job legitimately gets: its owner's identity, the portal's PATH, the form's.
    assert environment["USER"] == environment["LOGNAME"] == "alice"
    assert environment["HOME"] == "/home/alice"
    assert environment["EPOCHS"] == "3"
    assert environment["SLURM_JOB_ACCOUNT"] == project.slurm_account
    unexpected = {
        name
        for name in environment
        if name not in {"USER", "LOGNAME", "HOME", "PATH", "EPOCHS"}
        and not SLURM_ADDED.fullmatch(name)
    }
    assert unexpected == set(), f"{unexpected} in:\n{output}"

    # And nothing of the worker's: no secret, no PORTAL_*/SBATCH_* name, no value it set.
    for value in [*secret.values(), *worker_env.values()]:
        assert value not in output
    assert not [name for name in environment if name.startswith(("PORTAL_", "SBATCH_"))]
    assert "DJANGO_SETTINGS_MODULE" not in environment
    assert environment.get("SLURM_CONF") != "/worker-only/slurm.conf"

    # The worker's own log holds none of them either.
    log = (REPO / "var" / f"{queue}.log").read_text()
    assert "jobs.tasks" in log  # it is the log of the worker that submitted the job
    for value in secret.values():
        assert value not in log


def test_an_access_token_is_never_logged(client, alice, caplog, settings):
    settings.API_RATE = None
    settings.API_ANON_RATE = None
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="django")  # Django's own config says INFO
    client.force_login(alice)
    # Made through the API: the plain token is in that answer and nowhere else.
    created = client.post(
        "/api/v1/tokens/", {"name": "laptop", "expires_in_days": 7}, content_type="application/json"
    )
    assert created.status_code == 201
    plain = created.json()["token"]
    assert plain.startswith("sgp_")
    revoked_token, other = token_create(user=alice, name="revoked")
    token_revoke(token=revoked_token)

    with CaptureQueriesContext(connection):  # SQL is logged at DEBUG as well
        scripted = Client(headers={"Authorization": f"Bearer {plain}"})
        assert scripted.get("/api/v1/me/").status_code == 200
        assert scripted.get("/api/v1/jobs/").status_code == 200
        unknown = "sgp_" + secrets.token_urlsafe(32)
        refused = Client(headers={"Authorization": f"Bearer {unknown}"}).get("/api/v1/me/")
        assert refused.status_code == 401
        revoked = Client(headers={"Authorization": f"Bearer {other}"}).get("/api/v1/me/")
        assert revoked.status_code == 401
        mangled = Client(headers={"Authorization": f"Bearer {plain}x"}).get("/api/v1/me/")
        assert mangled.status_code == 401

    assert any(record.name == "django.db.backends" for record in caplog.records)
    assert any("Unauthorized" in record.getMessage() for record in caplog.records)
    for token in (plain, unknown, other):
        assert token not in caplog.text
        assert token[4:] not in caplog.text  # nor without its prefix
