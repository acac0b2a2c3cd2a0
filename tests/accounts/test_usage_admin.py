"""Usage per project in the allocation managers' console: balance, chart, tables, CSV."""

import csv
import datetime as dt
import io
from unittest import mock

import pytest
from django.http import StreamingHttpResponse

from accounts.ledger import allocation_grant, ledger_charge, ledger_hold
from accounts.selectors import MonthlyUsage, project_usage_by_month_and_user
from accounts.services import membership_set, project_create, user_create
from accounts.usage import MonthRow, monthly_rows, usage_chart
from clusters.models import Partition
from clusters.services import cluster_register

TODAY = dt.date.today()
HOUR = 3600
OCTOBER = dt.datetime(2026, 10, 15, 12, tzinfo=dt.UTC)
NOVEMBER = dt.datetime(2026, 11, 3, 9, tzinfo=dt.UTC)


@pytest.fixture
def cluster(db):
    return cluster_register(name="portal-dev")


@pytest.fixture
def partitions(cluster):
    return (
        Partition.objects.create(cluster=cluster, name="gpu"),
        Partition.objects.create(cluster=cluster, name="debug"),
    )


def grant(project, cluster, manny, gpu_hours=100):
    return allocation_grant(
        project=project,
        cluster=cluster,
        gpu_hours=gpu_hours,
        starts_on=TODAY - dt.timedelta(days=60),
        ends_on=TODAY + dt.timedelta(days=30),
        actor=manny,
        reason="start",
    )


def charge(allocation, reference, hours, *, at, user=None, partition=None):
    # created_at is auto_now_add and the ledger refuses UPDATE: date the entry as it is made.
    with mock.patch("django.utils.timezone.now", return_value=at):
        return ledger_charge(
            allocation=allocation,
            reference=reference,
            gpu_seconds=int(hours * HOUR),
            user=user,
            partition=partition,
        )


@pytest.fixture
def vision(cluster, partitions, manny, alice, bob):
    """Alice and Bob charged in October and November, Bob holds 4 GPU-hours more,
    and half an hour came from work outside the portal."""
    project = project_create(slug="vision", name="Vision Lab", slurm_account="vision")
    membership_set(project=project, user=alice, role="pi")
    membership_set(project=project, user=bob, role="member")
    allocation = grant(project, cluster, manny)
    gpu, debug = partitions
    charge(allocation, "portal-dev:1", 3, at=OCTOBER, user=alice, partition=gpu)
    charge(allocation, "portal-dev:2", 2, at=OCTOBER, user=bob, partition=gpu)
    charge(allocation, "portal-dev:3", 1.5, at=NOVEMBER, user=alice, partition=debug)
    charge(allocation, "portal-dev:4", 0.5, at=NOVEMBER, partition=gpu)
    ledger_hold(allocation=allocation, reference="token-1", gpu_seconds=4 * HOUR, user=bob)
    return project


def usage_url(project, suffix=""):
    return f"/admin/accounts/project/{project.pk}/usage/{suffix}"


def read_csv(response) -> list[list[str]]:
    assert isinstance(response, StreamingHttpResponse)
    return list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))


def test_the_usage_page_shows_balance_months_users_and_partitions(client, manny, vision):
    client.force_login(manny)
    response = client.get(usage_url(vision))
    assert response.status_code == 200
    page = response.content.decode()
    # Balance: 100 granted, 7 used, 4 held, 89 available.
    for figure in ["100.00", "7.00", "4.00", "89.00"]:
        assert f'<td class="number">{figure}</td>' in page
    chart = response.context["chart"]
    assert [series.name for series in chart.series] == ["alice", "bob", "(no portal user)"]
    assert chart.rows == [
        MonthRow("2026-10", [3.0, 2.0, 0.0], 5.0),
        MonthRow("2026-11", [1.5, 0.0, 0.5], 2.0),
    ]
    assert chart.total == 7.0
    assert 'role="img"' in page and "<title>GPU-hours per month, by user</title>" in page
    assert "<title>alice, 2026-10: 3.00 GPU-h</title>" in page
    assert "<title>bob, 2026-10: 2.00 GPU-h</title>" in page
    assert "<title>alice, 2026-11: 1.50 GPU-h</title>" in page
    assert response.context["by_user"] == [("alice", 4.5), ("bob", 2.0), ("(no portal user)", 0.5)]
    assert dict(response.context["by_partition"]) == {"gpu": 5.5, "debug": 1.5}


def test_the_month_and_user_selector_is_one_query(vision, django_assert_num_queries):
    with django_assert_num_queries(1):
        usage = project_usage_by_month_and_user(vision)
    assert [(cell.month, cell.username, cell.gpu_hours) for cell in usage] == [
        (dt.date(2026, 10, 1), "alice", 3.0),
        (dt.date(2026, 10, 1), "bob", 2.0),
        (dt.date(2026, 11, 1), "alice", 1.5),
        (dt.date(2026, 11, 1), None, 0.5),
    ]


def test_the_project_page_and_list_link_to_the_usage(client, manny, vision):
    client.force_login(manny)
    change = client.get(f"/admin/accounts/project/{vision.pk}/change/")
    assert usage_url(vision).encode() in change.content
    changelist = client.get("/admin/accounts/project/")
    assert changelist.status_code == 200
    assert usage_url(vision).encode() in changelist.content
    assert b"89.0" in changelist.content  # available on the active allocation


def test_a_project_without_charges_says_so(client, manny):
    project = project_create(slug="empty", name="Empty", slurm_account="empty")
    client.force_login(manny)
    response = client.get(usage_url(project))
    assert response.status_code == 200
    assert b"No GPU-hours have been charged to this project yet." in response.content
    assert b"<svg viewBox" not in response.content


@pytest.mark.parametrize("suffix", ["", "charges.csv", "monthly.csv"])
def test_a_researcher_is_sent_to_the_login(client, alice, vision, suffix):
    client.force_login(alice)  # the project's PI, but not staff
    response = client.get(usage_url(vision, suffix))
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


@pytest.mark.parametrize("suffix", ["", "charges.csv", "monthly.csv"])
def test_staff_without_the_project_permission_are_refused(client, vision, suffix):
    staff = user_create(username="sam", password="pw-sam-12345", is_staff=True)
    client.force_login(staff)
    assert client.get(usage_url(vision, suffix)).status_code == 403


def test_an_unknown_project_is_not_found(client, manny):
    client.force_login(manny)
    assert client.get("/admin/accounts/project/999999/usage/").status_code == 404


def test_the_charges_csv_has_one_row_per_charge(client, manny, vision):
    client.force_login(manny)
    response = client.get(usage_url(vision, "charges.csv"))
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="vision-charges.csv"'
    header, *rows = read_csv(response)
    assert header == [
        "charged_at",
        "user",
        "cluster",
        "partition",
        "reference",
        "gpu_hours",
        "gpu_seconds",
    ]
    assert [row[1:] for row in rows] == [
        ["alice", "portal-dev", "gpu", "portal-dev:1", "3.0000", "10800"],
        ["bob", "portal-dev", "gpu", "portal-dev:2", "2.0000", "7200"],
        ["alice", "portal-dev", "debug", "portal-dev:3", "1.5000", "5400"],
        ["", "portal-dev", "gpu", "portal-dev:4", "0.5000", "1800"],
    ]
    assert rows[0][0] == "2026-10-15T12:00:00+00:00"
    assert sum(int(row[-1]) for row in rows) == vision.allocations.get().used_gpu_seconds


def test_the_monthly_csv_totals_the_usage(client, manny, vision):
    client.force_login(manny)
    header, *rows = read_csv(client.get(usage_url(vision, "monthly.csv")))
    assert header == ["project", "month", "user", "gpu_hours", "gpu_seconds"]
    assert rows == [
        ["vision", "2026-10", "alice", "3.0000", "10800"],
        ["vision", "2026-10", "bob", "2.0000", "7200"],
        ["vision", "2026-11", "alice", "1.5000", "5400"],
        ["vision", "2026-11", "", "0.5000", "1800"],
    ]
    assert sum(float(row[3]) for row in rows) == 7.0


def test_a_csv_cell_a_spreadsheet_would_run_stays_text(client, manny, vision, cluster):
    allocation = vision.allocations.get()
    charge(allocation, "=HYPERLINK(1)", 1, at=NOVEMBER)
    client.force_login(manny)
    _, *rows = read_csv(client.get(usage_url(vision, "charges.csv")))
    assert rows[-1][4] == "'=HYPERLINK(1)"


def test_every_monthly_csv_cell_a_spreadsheet_would_run_stays_text():
    # A slug may start with "-"; a user name comes from the site's directory.
    (row,) = monthly_rows([MonthlyUsage("-cmd", dt.date(2026, 11, 1), "=1+1", HOUR)])
    assert row == ["'-cmd", "2026-11", "'=1+1", "1.0000", "3600"]


def test_the_list_action_exports_the_selected_projects(client, manny, vision, cluster, bob):
    robotics = project_create(slug="robotics", name="Robotics", slurm_account="robotics")
    charge(grant(robotics, cluster, manny), "portal-dev:r1", 4, at=NOVEMBER, user=bob)
    other = project_create(slug="other", name="Other", slurm_account="other")
    charge(grant(other, cluster, manny), "portal-dev:o1", 9, at=NOVEMBER, user=bob)
    client.force_login(manny)
    response = client.post(
        "/admin/accounts/project/",
        {"action": "export_usage_csv", "_selected_action": [vision.pk, robotics.pk]},
    )
    assert response.status_code == 200
    header, *rows = read_csv(response)
    assert header == ["project", "month", "user", "gpu_hours", "gpu_seconds"]
    assert [row[0] for row in rows] == ["robotics", *["vision"] * 4]
    assert rows[0] == ["robotics", "2026-11", "bob", "4.0000", "14400"]


def test_the_chart_keeps_empty_months_and_groups_small_users():
    usage = [
        MonthlyUsage("p", dt.date(2026, 1, 1), "u1", 10 * HOUR),
        MonthlyUsage("p", dt.date(2026, 1, 1), "u2", 5 * HOUR),
        MonthlyUsage("p", dt.date(2026, 3, 1), "u3", 2 * HOUR),
        MonthlyUsage("p", dt.date(2026, 3, 1), "u4", 1 * HOUR),
    ]
    chart = usage_chart(usage, max_series=3)
    assert [series.name for series in chart.series] == ["u1", "u2", "2 others"]
    assert chart.rows == [
        MonthRow("2026-01", [10.0, 5.0, 0.0], 15.0),
        MonthRow("2026-02", [0.0, 0.0, 0.0], 0.0),
        MonthRow("2026-03", [0.0, 0.0, 3.0], 3.0),
    ]
    # The axis tops out at a round 20; January's stack fills three quarters of it.
    assert [tick.label for tick in chart.y_ticks] == ["0", "5", "10", "15", "20"]
    january = [bar for bar in chart.bars if "2026-01" in bar.title]
    assert sum(bar.height for bar in january) == pytest.approx(0.75 * (chart.bottom - chart.top))
    assert len(chart.bars) == 3  # no bar for an empty month or user
