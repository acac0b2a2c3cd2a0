"""A grant counts only from its first day: next year's allocation, approved today, is in no
"available" figure, raises no Slurm limit and is shown as "starts on …" until the day
comes; then the next reconcile run (beat's) raises the limit, and plain sbatch may use it."""

import datetime as dt
import subprocess

import pytest
from django.test import Client
from django.utils import timezone
from django.utils.formats import date_format

from accounts.ledger import allocation_grant
from accounts.models import Allocation
from accounts.reconcile import reconcile
from accounts.requests import allocation_request_approve, allocation_request_create
from accounts.selectors import active_allocation, allocation_status, project_balance
from accounts.services import membership_set, user_create
from accounts.tasks import reconcile_task
from accounts.tokens import token_create
from clusters.slurm import client_for
from tests.factories import project_with_allocation, recorded_cluster, wait_for

HOUR = 3600
TODAY = dt.date.today()
# After the month's allocation of the tests' projects (it ends in 29 days), for half a year.
NEXT_YEAR = (TODAY + dt.timedelta(days=40), TODAY + dt.timedelta(days=220))
STARTS = date_format(NEXT_YEAR[0])  # as pages write it


def future_grant(project, cluster, gpu_hours=250, period=NEXT_YEAR) -> Allocation:
    return allocation_grant(
        project=project,
        cluster=cluster,
        gpu_hours=gpu_hours,
        starts_on=period[0],
        ends_on=period[1],
        actor=None,
        reason="next year",
    )


def travel_to(monkeypatch, day: dt.date) -> None:
    """The portal's today is ``day`` (Slurm's clock is not the portal's concern here)."""
    monkeypatch.setattr(timezone, "localdate", lambda *args, **kwargs: day)


@pytest.fixture
def project(db, alice, bob):
    project = project_with_allocation(recorded_cluster(), pi=alice, gpu_hours=10)
    membership_set(project=project, user=bob, role="member")
    return project


@pytest.fixture
def future(project):
    return future_grant(project, project.allocations.get().cluster)


def test_a_future_grant_is_in_no_available_figure_until_its_first_day(project, future, monkeypatch):
    assert project_balance(project).granted_gpu_seconds == 10 * HOUR
    assert project_balance(project).available_gpu_seconds == 10 * HOUR
    current = active_allocation(project=project, cluster=future.cluster)
    assert current != future
    travel_to(monkeypatch, NEXT_YEAR[0])
    assert project_balance(project).available_gpu_seconds == 250 * HOUR
    assert active_allocation(project=project, cluster=future.cluster) == future


def test_an_approved_request_for_next_year_is_granted_not_available(project, alice, monkeypatch):
    manager = user_create(
        username="manny", password="manny-pass-1234", groups=["Allocation managers"]
    )
    asked = allocation_request_create(
        project=project,
        requested_by=alice,
        cluster=project.allocations.get().cluster,
        gpu_hours=250,
        starts_on=NEXT_YEAR[0],
        ends_on=NEXT_YEAR[1],
        justification="next year's runs",
    )
    allocation_request_approve(request=asked, manager=manager, comment="")
    assert project_balance(project).available_gpu_seconds == 10 * HOUR
    future = Allocation.objects.get(starts_on=NEXT_YEAR[0])
    assert allocation_status(future) == f"Starts on {STARTS}"


def test_the_api_says_which_allocation_is_in_force_and_leaves_the_future_one_out_of_the_balance(
    project, future, alice
):
    _, plain = token_create(user=alice, name="tests")
    api = Client(headers={"Authorization": f"Bearer {plain}"})
    shown = api.get(f"/api/v1/projects/{project.slug}/").json()
    assert shown["balance"]["available_gpu_hours"] == 10
    assert shown["balance"]["granted_gpu_hours"] == 10
    in_force = {a["starts_on"]: a["in_force"] for a in shown["allocations"]}
    assert in_force == {str(project.allocations.exclude(pk=future.pk).get().starts_on): True,
                        str(NEXT_YEAR[0]): False}  # fmt: skip
    listed = api.get("/api/v1/projects/").json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert rows[0]["balance"]["available_gpu_hours"] == 10


def test_the_pages_say_when_it_starts_and_list_the_allocation_in_force_first(
    client, project, future, bob
):
    client.force_login(bob)
    home = client.get("/").content.decode()
    assert f"starts on {STARTS}" in home and "not available before then" in home
    assert home.index('data-cluster="recorded"') < home.index('data-upcoming="recorded"')
    page = client.get(f"/projects/{project.slug}/").content.decode()
    balance = page.split('id="balance"')[1].split("</dl>")[0]
    assert "<dt>Available</dt><dd>10 GPU-h</dd>" in " ".join(balance.split()).replace("> <", "><")
    assert f"250 GPU-h granted, starts on {STARTS}" in " ".join(page.split())
    assert "260" not in balance


def test_the_console_says_it_starts_later_and_leaves_it_out_of_the_project_available(
    client, project, future, monkeypatch
):
    manager = user_create(
        username="manny", password="manny-pass-1234", groups=["Allocation managers"]
    )
    manager.is_staff = True
    manager.save()
    client.force_login(manager)
    listing = " ".join(client.get("/admin/accounts/allocation/").content.decode().split())
    assert f"Starts on {STARTS}" in listing
    assert f"— (Starts on {STARTS})" in listing  # its available column
    projects = " ".join(client.get("/admin/accounts/project/").content.decode().split())
    assert '<td class="field-available">10.0</td>' in projects
    travel_to(monkeypatch, NEXT_YEAR[0])
    listing = " ".join(client.get("/admin/accounts/allocation/").content.decode().split())
    # This year's, ended but not yet expired by the hourly task, says so.
    assert f"Starts on {STARTS}" not in listing and "Ended on" in listing
    projects = " ".join(client.get("/admin/accounts/project/").content.decode().split())
    assert '<td class="field-available">250.0</td>' in projects


def test_the_metrics_count_only_allocations_in_force(project, future):
    from accounts.metrics import ledger_metric_families

    available = next(f for f in ledger_metric_families() if f.name.endswith("available_gpu_hours"))
    assert {s.labels["allocation"] for s in available.samples} == {
        str(project.allocations.exclude(pk=future.pk).get().pk)
    }


# Live: Slurm's limit on the dev cluster, and plain sbatch as a project member.


def sbatch_as(user: str, account: str, *extra: str) -> int:
    submitted = subprocess.run(
        ["runuser", "-u", user, "--", "sbatch", "--parsable", f"--account={account}",
         "--partition=debug", "--chdir=/tmp", "--output=/dev/null", "--wrap=sleep 1", *extra],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return int(submitted.stdout.strip().split(";")[0])


@pytest.mark.slurm
def test_slurm_gets_the_future_grant_only_from_its_first_day(
    make_project, dev_cluster, alice, monkeypatch
):
    # One GPU-hour now (60 GPU-minutes at the debug partition's weight), 250 next year.
    project = make_project(members={alice: "pi"}, gpu_hours=1, in_slurm=False)
    future_grant(project, dev_cluster)
    report = reconcile(cluster=dev_cluster)
    assert not report.errors, report.errors
    client = client_for(dev_cluster)
    account = project.slurm_account
    limits = client.account_limits(account)
    weight = min(p.billing_weight for p in dev_cluster.partitions.all())
    assert limits.gpu_minutes == client.minutes_used(account).gpu + round(60 / float(weight))
    # Two GPUs for an hour: more than this year's hour, well within next year's 250.
    job = sbatch_as("alice", account, "--gpus-per-node=2", "--time=60")
    try:

        def pending_at_the_limit():
            entry = next((e for e in client.queue() if e.job_id == job), None)
            return entry is not None and entry.reason == "AssocGrpGRESMinutes"

        wait_for(pending_at_the_limit, timeout_s=30, interval_s=0.5, what="the job to pend")

        # The day comes: beat's next run raises the limit, and the job starts.
        travel_to(monkeypatch, NEXT_YEAR[0])
        reconcile_task()
        raised = client.account_limits(account).gpu_minutes
        assert raised >= client.minutes_used(account).gpu + round(250 * 60 / float(weight))

        def left_the_limit():
            entry = next((e for e in client.queue() if e.job_id == job), None)
            return entry is None or entry.reason != "AssocGrpGRESMinutes"

        wait_for(left_the_limit, timeout_s=30, interval_s=0.5, what="the job to leave the limit")
    finally:
        subprocess.run(["scancel", str(job)], check=False)


@pytest.mark.slurm
def test_a_project_whose_only_grant_starts_later_takes_no_plain_sbatch(
    make_project, dev_cluster, alice
):
    project = make_project(members={alice: "pi"}, gpu_hours=1)  # in Slurm, as last year's
    current = project.allocations.get()
    Allocation.objects.filter(pk=current.pk).update(
        starts_on=TODAY - dt.timedelta(days=60), ends_on=TODAY - dt.timedelta(days=1)
    )
    future_grant(project, dev_cluster)
    report = reconcile(cluster=dev_cluster)
    assert not report.errors, report.errors
    refused = subprocess.run(
        ["runuser", "-u", "alice", "--", "sbatch", "--parsable",
         f"--account={project.slurm_account}", "--partition=debug", "--time=5",
         "--chdir=/tmp", "--output=/dev/null", "--wrap=true"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "submit" in refused.stderr.lower(), refused.stderr
