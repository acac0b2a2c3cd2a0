"""A submission always tells Slurm whether the job may be requeued: sbatch's command line
(which wins over any directive) and slurmrestd's job description, on every version of the
REST API the portal speaks. Slurm's own default is the site's JobRequeue (1 out of the box)."""

from dataclasses import replace

import pytest

from clusters.slurm.cli import sbatch_arguments
from clusters.slurm.rest_parsing import SUPPORTED_VERSIONS, job_description, reshaped, submit_body
from clusters.slurm.types import SubmitRequest

# What 22.05 (v0.0.37/38) reads as sbatch's flags, and v0.0.40+ as one boolean.
REQUEUE_KEYS = {"requeue", "no_requeue"}
OLD_VERSIONS = [v for v in SUPPORTED_VERSIONS if not reshaped(v)]
RESHAPED_VERSIONS = [v for v in SUPPORTED_VERSIONS if reshaped(v)]


def request(**changes) -> SubmitRequest:
    base = SubmitRequest(
        user="alice",
        script="#!/bin/bash\n#SBATCH --requeue\ntrue\n",
        account="vision",
        partition="debug",
        name="train",
        time_limit_minutes=30,
        working_directory="/home/alice",
        stdout_path="/home/alice/out-%j.txt",
        stderr_path="/home/alice/err-%j.txt",
        gpus_per_node=1,
        comment="portal:x",
    )
    return replace(base, **changes)


def test_a_request_says_no_requeue_unless_it_asks():
    assert SubmitRequest(
        user="alice", script="#!/bin/bash\n", account="a", partition="p", name="n",
        time_limit_minutes=1, working_directory="/w", stdout_path="o", stderr_path="e",
    ).requeue is False  # fmt: skip


@pytest.mark.parametrize(("requeue", "flag"), [(False, "--no-requeue"), (True, "--requeue")])
def test_sbatch_gets_exactly_one_requeue_flag_on_its_command_line(requeue, flag):
    arguments = sbatch_arguments(request(requeue=requeue))
    # On the command line, so a directive in the script (as this one's) cannot turn it.
    assert [a for a in arguments if "requeue" in a] == [flag]


@pytest.mark.parametrize("version", OLD_VERSIONS)
def test_22_05_is_sent_the_one_flag_that_means_what_is_wanted(version):
    # 22.05 sets either flag whatever its value: "requeue": false would ask for requeue.
    plain = job_description(request(), version)
    assert {k: plain[k] for k in REQUEUE_KEYS & set(plain)} == {"no_requeue": True}
    wanted = job_description(request(requeue=True), version)
    assert {k: wanted[k] for k in REQUEUE_KEYS & set(wanted)} == {"requeue": True}
    assert submit_body(request(), version)["job"] == plain


@pytest.mark.parametrize("version", RESHAPED_VERSIONS)
def test_24_11_is_sent_requeue_as_a_boolean_either_way(version):
    for requeue in (False, True):
        job = submit_body(request(requeue=requeue), version)["job"]
        assert {k: job[k] for k in REQUEUE_KEYS & set(job)} == {"requeue": requeue}
        assert job["requeue"] is requeue  # a boolean, as its job_desc_msg has it
