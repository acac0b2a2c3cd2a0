"""A job that really ran on the dev cluster (Slurm 22.05) shows its efficiency on its page
and in the API, from what accounting recorded of its steps."""

import pytest
from django.test import Client

from jobs.models import Job
from jobs.services import job_create
from tests.api.conftest import token_client
from tests.factories import request_for, run_to_the_end, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]

# About 3 s of one busy CPU holding some 50 MB, in an srun step sampled every second
# (the dev cluster's JobAcctGatherFrequency is 30 s, longer than the job).
BURN = (
    "srun --acctg-freq=task=1 /bin/bash -c 'head -c 50000000 /dev/zero | tail >/dev/null;"
    " end=$((SECONDS+3)); while [ $SECONDS -lt $end ]; do :; done'\n"
)


def test_a_finished_jobs_page_shows_its_efficiency(celery_worker, make_project, alice, workdir):
    project = make_project(members={alice: "pi"}, gpu_hours=10)
    job = job_create(user=alice, request=request_for(project, workdir, script=BURN))
    wait_for(lambda: Job.objects.get(pk=job.pk).slurm_job_id, what="the worker to submit the job")
    run_to_the_end(job)

    efficiency = token_client(alice).get(f"/api/v1/jobs/{job.pk}/").json()["efficiency"]
    # It burns a CPU for 3 s of wall time; on a loaded machine it gets less than all of it.
    assert efficiency["cpu_time_s"] > 0.2
    assert 0 < efficiency["cpu_percent"] <= 100
    assert efficiency["mem_peak_bytes"] > 0 and efficiency["mem_allocated_bytes"] > 0
    assert efficiency["time_limit_s"] == 300 and efficiency["elapsed_s"] >= 3
    assert efficiency["gpu_util_percent"] is None  # fake GPUs: not recorded, not 0

    client = Client()
    client.force_login(alice)
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    section = html.split('id="job-efficiency"')[1].split("</section>")[0]
    assert f"<strong>{efficiency['cpu_percent']:.0f} %</strong>" in section
    assert "of CPU time out of" in section
    assert "requested (" in section  # the memory peak against the request
    assert "of a 5 min limit" in section
    gpu = section.split('data-efficiency="gpu"')[1].split("</dd>")[0]
    assert "not recorded by this cluster" in gpu
