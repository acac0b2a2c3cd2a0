import pytest

from clusters.slurm.states import SlurmJobState, normalise_state
from jobs.states import SLURM_TO_PORTAL, TERMINAL_STATES, JobState, portal_state


def test_every_slurm_state_has_a_portal_state():
    assert set(SLURM_TO_PORTAL) == set(SlurmJobState)


def test_success_and_each_failure_stay_apart():
    ends = {portal_state(s) for s in SlurmJobState} & TERMINAL_STATES
    assert JobState.COMPLETED in ends
    assert portal_state(SlurmJobState.FAILED) != JobState.COMPLETED
    assert portal_state(SlurmJobState.COMPLETING) == JobState.RUNNING
    assert len(ends) == 7  # completed, failed, cancelled, timeout, oom, node_fail, preempted


def test_a_requeued_job_goes_back_to_pending():
    assert portal_state(SlurmJobState.REQUEUED) == JobState.PENDING


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("CANCELLED by 1000", SlurmJobState.CANCELLED),
        ("cancelled", SlurmJobState.CANCELLED),
        ("CA", SlurmJobState.CANCELLED),
        ("PD", SlurmJobState.PENDING),
        ("OUT_OF_MEMORY", SlurmJobState.OUT_OF_MEMORY),
        ("OOM", SlurmJobState.OUT_OF_MEMORY),
        (" RUNNING ", SlurmJobState.RUNNING),
    ],
)
def test_slurm_spellings_are_normalised(text, state):
    assert normalise_state(text) is state


def test_an_unknown_state_is_not_guessed():
    with pytest.raises(ValueError):
        normalise_state("EXPLODED")
