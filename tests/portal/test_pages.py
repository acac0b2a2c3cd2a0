"""The dashboard and a project's page: balances, burn-down, jobs, scoping and queries."""

import datetime as dt

import pytest

from accounts.ledger import ledger_charge
from accounts.models import AllocationRequest
from portal.charts import burn_down
from tests.factories import bulk_jobs

pytestmark = pytest.mark.slurm


@pytest.fixture
def project(make_project, alice, bob):
    project = make_project(members={alice: "pi", bob: "member"}, gpu_hours=10, in_slurm=False)
    ledger_charge(
        allocation=project.allocations.get(), reference="t:1", gpu_seconds=2 * 3600, user=alice
    )
    return project


def test_the_dashboard_shows_each_projects_balance_and_burn_down(client, alice, project):
    client.force_login(alice)
    html = client.get("/").content.decode()
    assert project.name in html
    assert "2 GPU-h" in html and "8 GPU-h" in html  # used, available
    # 2 GPU-hours in two weeks is 1/7 a day: the 8 left outlast the 30-day period.
    assert "lasts the whole period" in html


def test_a_member_sees_the_balance_and_only_their_jobs(client, alice, bob, project):
    bulk_jobs(owner=alice, project=project, count=2, name="alices")
    client.force_login(bob)
    html = client.get(f"/projects/{project.slug}/").content.decode()
    assert "8 GPU-h" in html
    assert "alices" not in html
    assert "Ask for GPU-hours" not in html and "By member" not in html


def test_the_pi_sees_members_usage_and_all_jobs(client, alice, bob, project):
    bulk_jobs(owner=bob, project=project, count=1, name="bobs")
    client.force_login(alice)
    html = client.get(f"/projects/{project.slug}/").content.decode()
    assert "bobs" in html
    assert "By member" in html and "<svg" in html
    assert 'id="request"' in html


def test_the_pi_asks_for_hours_and_bad_dates_are_refused_beside_the_field(
    client, alice, project, dev_cluster
):
    client.force_login(alice)
    today = dt.date.today()
    bad = client.post(
        f"/projects/{project.slug}/",
        {"cluster": dev_cluster.pk, "gpu_hours": "0", "starts_on": today, "ends_on": today,
         "justification": "more"},
    )  # fmt: skip
    assert bad.status_code == 400
    assert 'id="error-gpu_hours"' in bad.content.decode()
    good = client.post(
        f"/projects/{project.slug}/",
        {"cluster": dev_cluster.pk, "gpu_hours": "50", "starts_on": today,
         "ends_on": today + dt.timedelta(days=30), "justification": "a paper deadline"},
    )  # fmt: skip
    assert good.status_code == 302
    assert AllocationRequest.objects.get(project=project).gpu_hours == 50


def test_an_outsiders_project_page_is_a_404_and_members_cannot_post(client, charlie, bob, project):
    client.force_login(charlie)
    assert client.get(f"/projects/{project.slug}/").status_code == 404
    client.force_login(bob)
    assert client.post(f"/projects/{project.slug}/", {"gpu_hours": "5"}).status_code == 404


def test_the_project_page_issues_a_bounded_number_of_queries(
    client, alice, project, django_assert_max_num_queries
):
    bulk_jobs(owner=alice, project=project, count=1000)
    client.force_login(alice)
    with django_assert_max_num_queries(25):
        assert client.get(f"/projects/{project.slug}/").status_code == 200


def test_the_burn_down_forecasts_the_day_the_balance_runs_out():
    today = dt.date(2026, 3, 15)
    chart = burn_down(
        granted_gpu_seconds=100 * 3600,
        available_gpu_seconds=30 * 3600,
        daily_used_gpu_seconds={today - dt.timedelta(days=n): 5 * 3600 for n in range(14)},
        starts_on=dt.date(2026, 3, 1),
        ends_on=dt.date(2026, 4, 1),
        today=today,
    )
    assert chart.rate_gpu_hours_per_day == 5
    assert chart.runs_out_on == dt.date(2026, 3, 21)  # 30 hours at 5 a day
    idle = burn_down(
        granted_gpu_seconds=100 * 3600, available_gpu_seconds=100 * 3600,
        daily_used_gpu_seconds={}, starts_on=dt.date(2026, 3, 1), ends_on=dt.date(2026, 4, 1),
        today=today,
    )  # fmt: skip
    assert idle.runs_out_on is None and idle.rate_gpu_hours_per_day == 0


def test_a_pending_job_says_why_it_waits_on_its_page_and_in_the_lists(client, alice, project):
    (spent,) = bulk_jobs(
        owner=alice, project=project, count=1, state="pending", reason="AssocGrpGRESMinutes"
    )
    (waiting,) = bulk_jobs(
        owner=alice, project=project, count=1, state="pending", name="wait", nodes=2,
        reason="ReqNodeNotAvail, UnavailableNodes:vm",
    )  # fmt: skip
    client.force_login(alice)
    page = client.get(f"/jobs/{spent.pk}/").content.decode()
    assert "Your project has used its GPU-hours on this cluster." in page
    assert "<code>AssocGrpGRESMinutes</code>" in page
    assert f'href="/projects/{project.slug}/#request"' in page
    assert "Slurm says: AssocGrpGRESMinutes" not in page
    waits = client.get(f"/jobs/{waiting.pk}/").content.decode()
    assert "Nodes it could run on are down" in waits
    assert "<code>ReqNodeNotAvail, UnavailableNodes:vm</code>" in waits
    for listing in ("/jobs/", "/", f"/projects/{project.slug}/"):
        html = client.get(listing).content.decode()
        assert "Your project has used its GPU-hours on this cluster." in html, listing
        assert 'title="AssocGrpGRESMinutes"' in html, listing  # Slurm's own, on hover
    japanese = client.get(f"/jobs/{spent.pk}/", HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    assert "プロジェクトはこのクラスタのGPU時間を使い切りました。" in japanese


def test_a_job_that_does_not_pend_has_no_pending_sentence(client, alice, project):
    (done,) = bulk_jobs(owner=alice, project=project, count=1, reason="NonZeroExitCode")
    client.force_login(alice)
    page = client.get(f"/jobs/{done.pk}/").content.decode()
    assert "Its last run ended" not in page and "Slurm says: NonZeroExitCode" in page
