"""Why a job pends, in words: every reason each installed Slurm can give (its libslurm's
own list, dev/slurm-reasons) has an explanation of its own, in English and Japanese, and
any text at all gives one."""

import os
import subprocess

import pytest
from django.utils import translation
from hypothesis import example, given, settings
from hypothesis import strategies as st

from jobs.pending_reasons import Explanation, Family, explain_pending_reason
from portal.devstack import DEV_CLUSTER, NEXT_CLUSTER
from tests.conftest import REPO

SLURM_REASONS = REPO / "dev" / "slurm-reasons"


def slurm_reasons(cluster: str) -> list[str]:
    """The reasons the cluster's installed Slurm names, from its own library."""
    if cluster == NEXT_CLUSTER and os.environ.get("PORTAL_CLUSTER_NEXT") == "off":
        pytest.skip(f"PORTAL_CLUSTER_NEXT=off: the stack has no {NEXT_CLUSTER}")
    run = subprocess.run(
        [str(SLURM_REASONS), cluster], capture_output=True, text=True, check=False, timeout=60
    )
    if run.returncode:
        pytest.fail(f"dev/slurm-reasons {cluster}: {run.stderr.strip()}", pytrace=False)
    reasons = run.stdout.split()
    # Each version names about 200; far fewer means the extraction is broken.
    assert len(reasons) > 150, reasons
    return reasons


@pytest.fixture(autouse=True)
def _english_after():
    yield
    translation.deactivate()


@pytest.mark.parametrize("cluster", [DEV_CLUSTER, NEXT_CLUSTER])
def test_every_reason_of_each_installed_slurm_is_explained(cluster):
    reasons = slurm_reasons(cluster)
    assert {"Priority", "Resources", "AssocGrpGRESMinutes", "ReqNodeNotAvail"} <= set(reasons)
    unexplained = [r for r in reasons if explain_pending_reason(r).family == Family.UNKNOWN]
    assert not unexplained, f"{cluster}: no explanation for {', '.join(unexplained)}"


@pytest.mark.parametrize("cluster", [DEV_CLUSTER, NEXT_CLUSTER])
def test_every_explanation_is_in_japanese(cluster):
    reasons = slurm_reasons(cluster)
    untranslated = []
    for reason in reasons:
        english = explain_pending_reason(reason, gpus=2)
        with translation.override("ja"):
            japanese = explain_pending_reason(reason, gpus=2)
        assert (japanese.code, japanese.family) == (english.code, english.family)
        if japanese.sentence == english.sentence or (
            english.advice and japanese.advice == english.advice
        ):
            untranslated.append(reason)
        assert "%(" not in english.sentence + english.advice + japanese.sentence, reason
    assert not untranslated, f"{cluster}: not in Japanese: {', '.join(untranslated)}"


def test_the_projects_gpu_hours_point_to_its_pi():
    spent = explain_pending_reason("AssocGrpGRESMinutes")
    assert spent.family == Family.GPU_HOURS
    assert "GPU-hours" in spent.sentence and "PI" in spent.advice
    assert explain_pending_reason("AssocGrpGRESRunMinutes").family == Family.GPU_HOURS
    # Another resource's or the QOS's time limit is a limit, not the project's GPU-hours.
    assert explain_pending_reason("AssocGrpCPUMinutesLimit").family == Family.LIMIT
    assert explain_pending_reason("QOSGrpGRESMinutes").family == Family.LIMIT


def test_resources_says_how_many_gpus_it_waits_for():
    assert "4 GPUs" in explain_pending_reason("Resources", gpus=4).sentence
    assert "1 GPU " in explain_pending_reason("Resources", gpus=1).sentence
    assert "GPU" not in explain_pending_reason("Resources").sentence
    with translation.override("ja"):
        assert "4" in explain_pending_reason("Resources", gpus=4).sentence


def test_squeues_description_counts_by_its_leading_name():
    nodes = explain_pending_reason("ReqNodeNotAvail, UnavailableNodes:vm,next1")
    assert (nodes.code, nodes.family) == ("ReqNodeNotAvail", Family.NODES)
    assert "UnavailableNodes" not in nodes.sentence
    # A job Slurm has not looked at yet: squeue's "None", stored as "".
    assert explain_pending_reason("").family == explain_pending_reason("None").family


@pytest.mark.parametrize(
    ("reason", "family"),
    [
        ("AssocMaxJobsLimit", Family.LIMIT),
        ("AssocGrpJobsLimit", Family.LIMIT),
        ("QOSMaxSubmitJobPerUserLimit", Family.LIMIT),
        ("QOSMaxGRESPerJob", Family.REQUEST),
        ("AssocMaxCpuPerNode", Family.REQUEST),
        ("QOSMinGRES", Family.REQUEST),
        ("QOSMaxWallDurationPerJobLimit", Family.REQUEST),
        ("MaxGRESRunMinsPerUser", Family.LIMIT),
        ("JobHeldUser", Family.HELD),
        ("JobHeldAdmin", Family.HELD),
        ("DependencyNeverSatisfied", Family.DEPENDENCY),
        ("PartitionDown", Family.PARTITION),
        ("Priority", Family.PRIORITY),
    ],
)
def test_families(reason, family):
    assert explain_pending_reason(reason).family == family


def test_a_reason_not_known_is_shown_as_slurm_gives_it():
    unknown = explain_pending_reason("SomethingNew (from Slurm 27)")
    assert unknown.family == Family.UNKNOWN
    assert unknown.sentence == "Slurm says: SomethingNew (from Slurm 27)"
    with translation.override("ja"):
        japanese = explain_pending_reason("SomethingNew (from Slurm 27)")
    assert japanese.sentence != unknown.sentence
    assert "SomethingNew (from Slurm 27)" in japanese.sentence


NAMES = ["ReqNodeNotAvail", "Resources", "AssocGrpGRESMinutes", "QOSMaxCpuPerUserLimit", "None"]


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=3000),
        st.builds(str.__add__, st.sampled_from(NAMES), st.text(max_size=300)),
    ),
    st.one_of(st.none(), st.integers(min_value=0, max_value=10**6)),
    st.sampled_from(["en", "ja"]),
)
@example("ReqNodeNotAvail, UnavailableNodes:vm", 8, "en")
@example("\x00", None, "ja")
@example("Resources\x00", 1, "ja")
@example("x" * 100_000, 3, "en")
def test_any_text_gets_an_explanation(reason, gpus, language):
    with translation.override(language):
        explained = explain_pending_reason(reason, gpus=gpus)
    assert isinstance(explained, Explanation)
    assert explained.sentence and explained.code
    assert isinstance(explained.advice, str)
    if reason.startswith("ReqNodeNotAvail,"):
        assert explained.family == Family.NODES
