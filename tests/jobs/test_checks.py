"""System checks of the job settings."""

from django.test import override_settings

from jobs.checks import check_job_settings


def ids(errors) -> list[str]:
    return [error.id for error in errors]


def test_the_default_settings_pass():
    assert check_job_settings(None) == []


@override_settings(JOB_SUBMIT_CLAIM_S=30, SLURM_COMMAND_TIMEOUT_S=20)
def test_a_claim_shorter_than_one_attempt_is_an_error_saying_the_minimum():
    errors = check_job_settings(None)
    assert ids(errors) == ["jobs.E001"]
    assert "at least 50" in errors[0].hint


@override_settings(JOB_ROOTS=["{home}", "scratch/{user}"])
def test_a_relative_root_is_an_error():
    assert ids(check_job_settings(None)) == ["jobs.E002"]
