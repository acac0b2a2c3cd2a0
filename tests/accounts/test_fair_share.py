"""A project's fair-share standing, read by the reconciler with its usage, in words on
the project page: no Slurm command runs for the page."""

import pytest
from django.utils import translation

from accounts.fair_share import project_standings, standing_words
from accounts.models import ReconcileReport
from accounts.reconcile import reconcile
from accounts.services import membership_set


@pytest.mark.parametrize(
    ("usage", "says"),
    [
        (0.0, "well below its share"),
        (0.15, "below its share"),
        (0.2, "about its share"),
        (0.3, "above its share"),
        (0.9, "well above its share"),
    ],
)
def test_the_words_follow_usage_against_share(usage, says):
    assert standing_words(share=0.2, usage=usage).startswith(says)
    with translation.override("ja"):
        assert not standing_words(share=0.2, usage=usage).startswith(says)


@pytest.mark.slurm
@pytest.mark.django_db
def test_the_reconciler_keeps_each_projects_standing_and_the_project_page_says_it(
    client, make_project, alice, django_assert_num_queries
):
    project = make_project(members={alice: "member"})
    reconcile(cluster=project.allocations.get().cluster)

    [standing] = project_standings(project)
    assert standing.cluster == "portal-dev"
    assert 0 < standing.share <= 1 and standing.usage == 0
    assert ReconcileReport.objects.get().standings[project.slurm_account]["usage"] == 0
    client.force_login(alice)
    page = client.get(f"/projects/{project.slug}/").content.decode()
    assert "Place in the queue" in page
    assert "well below its share: its jobs go ahead of most others" in page


@pytest.mark.django_db
def test_a_cluster_whose_standing_is_unknown_is_left_out(alice):
    from accounts.services import project_create
    from clusters.services import cluster_register

    cluster = cluster_register(name="elsewhere")
    project = project_create(slug="p", name="P", slurm_account="p")
    membership_set(project=project, user=alice, role="member")
    ReconcileReport.objects.create(
        cluster=cluster,
        ran_at="2026-12-04T00:00Z",
        standings={"p": {"share": None, "usage": 0.1}, "q": {"share": 0.5, "usage": 0.1}},
    )
    assert project_standings(project) == []
