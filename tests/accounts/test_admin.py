"""The allocation managers' console: every write goes through the bank's services."""

import datetime as dt
import logging

import pytest
from django import forms
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.contrib.auth.models import Group, Permission
from django.core.exceptions import ValidationError

from accounts.errors import NotAllowed
from accounts.ledger import allocation_adjust, allocation_grant, allocation_revoke, ledger_hold
from accounts.models import Allocation, AllocationRequest, LedgerEntry, Project, User
from accounts.requests import allocation_request_create
from accounts.services import membership_set, project_create, user_create
from clusters.services import cluster_register
from tests.slurm_accounts import sacctmgr_change

TODAY = dt.date.today()


def staff_with(username: str, *codenames: str):
    """A staff user outside the allocation managers' group, with just these permissions."""
    user = user_create(username=username, password=f"{username}-pass-1234", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return user


def form_data(response) -> dict:
    """What a browser posts back from an admin change form left as it is: the main
    form's and every inline's values, with the inlines' management forms."""
    page_forms = [response.context["adminform"].form]
    data: dict = {}
    for inline in response.context["inline_admin_formsets"]:
        management = inline.formset.management_form
        data |= {
            management.add_prefix(name): management[name].value() for name in management.fields
        }
        page_forms += inline.formset.forms
    for form in page_forms:
        for name, field in form.fields.items():
            key, value = form.add_prefix(name), form[name].value()
            if field.disabled:
                continue
            if isinstance(field.widget, forms.CheckboxInput):
                if value:
                    data[key] = "on"
            elif isinstance(field.widget, forms.MultiWidget):
                for index, part in enumerate(field.widget.decompress(value)):
                    data[f"{key}_{index}"] = "" if part is None else str(part)
            else:
                data[key] = "" if value is None else value
    return data


def log_of(obj) -> LogEntry:
    return LogEntry.objects.get(object_id=str(obj.pk), content_type__model=obj._meta.model_name)


@pytest.fixture
def vision(db):
    return project_create(slug="vision", name="Vision Lab", slurm_account="vision")


@pytest.fixture
def cluster(db):
    return cluster_register(name="portal-dev")


@pytest.fixture
def allocation(vision, cluster, manny):
    return allocation_grant(
        project=vision,
        cluster=cluster,
        gpu_hours=100,
        starts_on=TODAY,
        ends_on=TODAY + dt.timedelta(days=30),
        actor=manny,
        reason="start",
    )


@pytest.fixture
def pending_request(vision, cluster, alice):
    membership_set(project=vision, user=alice, role="pi")
    return allocation_request_create(
        project=vision,
        cluster=cluster,
        requested_by=alice,
        gpu_hours=25,
        starts_on=TODAY,
        ends_on=TODAY + dt.timedelta(days=30),
        justification="More training",
    )


def test_adding_an_allocation_grants_through_the_ledger(client, manny, vision, cluster):
    client.force_login(manny)
    response = client.post(
        "/admin/accounts/allocation/add/",
        {
            "project": vision.pk,
            "cluster": cluster.pk,
            "starts_on": TODAY.isoformat(),
            "ends_on": (TODAY + dt.timedelta(days=10)).isoformat(),
            "gpu_hours": 50,
            "reason": "new grant",
        },
    )
    assert response.status_code == 302, response.content
    grant = LedgerEntry.objects.get(kind="grant")
    assert (grant.gpu_seconds, grant.actor, grant.reason) == (50 * 3600, manny, "new grant")
    assert Allocation.objects.get().granted_gpu_seconds == 50 * 3600


def test_an_overlapping_grant_is_refused_on_the_form_and_grants_nothing(client, manny, allocation):
    client.force_login(manny)
    response = client.post(
        "/admin/accounts/allocation/add/",
        {
            "project": allocation.project.pk,
            "cluster": allocation.cluster.pk,
            "starts_on": TODAY.isoformat(),
            "ends_on": (TODAY + dt.timedelta(days=3)).isoformat(),
            "gpu_hours": 5,
            "reason": "twice",
        },
    )
    assert response.status_code == 200  # the form again, not a server error
    assert b"already has an allocation" in response.content
    assert Allocation.objects.count() == 1
    assert LedgerEntry.objects.filter(kind="grant").count() == 1


def test_an_adjustment_needs_a_reason_and_is_recorded(client, manny, allocation):
    client.force_login(manny)
    url = f"/admin/accounts/allocation/{allocation.pk}/adjust/"
    assert client.get(url).status_code == 200
    response = client.post(url, {"gpu_hours": "-10", "reason": ""})
    assert response.status_code == 200
    assert b"This field is required" in response.content
    assert client.post(url, {"gpu_hours": "-10", "reason": "overestimated"}).status_code == 302
    adjust = LedgerEntry.objects.get(kind="adjust")
    assert (adjust.gpu_seconds, adjust.actor, adjust.reason) == (-36000, manny, "overestimated")
    allocation.refresh_from_db()
    assert allocation.granted_gpu_seconds == 90 * 3600


def test_the_ledger_is_read_only_in_the_console(client, manny, allocation):
    client.force_login(manny)
    assert client.get("/admin/accounts/ledgerentry/").status_code == 200
    entry = LedgerEntry.objects.get()
    assert client.get("/admin/accounts/ledgerentry/add/").status_code == 403
    assert client.post(f"/admin/accounts/ledgerentry/{entry.pk}/delete/").status_code == 403


def test_a_request_is_approved_from_the_list(client, manny, pending_request):
    request = pending_request
    client.force_login(manny)
    response = client.post(
        "/admin/accounts/allocationrequest/",
        {"action": "approve", "_selected_action": [request.pk]},
        follow=True,
    )
    assert response.status_code == 200
    request.refresh_from_db()
    assert request.state == AllocationRequest.State.APPROVED
    assert request.allocation.granted_gpu_seconds == 25 * 3600


def test_denying_without_a_comment_says_so_and_changes_nothing(client, manny, pending_request):
    request = pending_request
    client.force_login(manny)
    response = client.post(
        "/admin/accounts/allocationrequest/",
        {"action": "deny", "_selected_action": [request.pk]},
        follow=True,
    )
    assert b"Say why the request is denied" in response.content
    request.refresh_from_db()
    assert request.state == AllocationRequest.State.PENDING


def test_a_researcher_cannot_reach_the_console(client, alice, allocation):
    client.force_login(alice)
    assert client.get(f"/admin/accounts/allocation/{allocation.pk}/adjust/").status_code == 302


def granted_project(account: str, *, cluster, manny) -> Project:
    """A project on ``account`` with one GPU-hour on the cluster for three days."""
    project = project_create(slug=account, name=f"Drift {account}", slurm_account=account)
    allocation_grant(
        project=project,
        cluster=cluster,
        gpu_hours=1,
        starts_on=TODAY,
        ends_on=TODAY + dt.timedelta(days=3),
        actor=manny,
        reason="drift",
    )
    return project


def no_slurm(monkeypatch) -> None:
    """Any Slurm client made from now on fails the test: a page must not ask Slurm."""

    def refuse(*args, **kwargs):
        raise AssertionError("the web tier made a Slurm client")

    from clusters import slurm
    from clusters.slurm.cli import CliClient
    from clusters.slurm.rest import RestClient

    monkeypatch.setattr(slurm, "client_for", refuse)
    monkeypatch.setattr(CliClient, "__init__", refuse)
    monkeypatch.setattr(RestClient, "__init__", refuse)


DRIFT = "/admin/accounts/allocation/slurm-drift/"


@pytest.mark.slurm
def test_the_drift_page_shows_the_last_runs_report_and_asks_slurm_nothing(
    client, manny, dev_cluster, monkeypatch
):
    import uuid

    from accounts.reconcile import reconcile
    from clusters.slurm import NotFound, client_for

    account = f"d{uuid.uuid4().hex[:10]}"
    granted_project(account, cluster=dev_cluster, manny=manny)
    reconcile(cluster=dev_cluster, dry_run=True)  # as `manage.py reconcile_slurm --dry-run`
    client.force_login(manny)
    with monkeypatch.context() as patched:
        no_slurm(patched)
        assert b"Slurm drift" in client.get("/admin/accounts/allocation/").content
        response = client.get(DRIFT)
    assert response.status_code == 200
    page = response.content.decode()
    assert f"{account}: add account" in page
    assert f"{account}: GrpTRESMins gres/gpu None → 60" in page
    assert "As of " in page and "dry run" in page
    with pytest.raises(NotFound):
        client_for(dev_cluster).account_limits(account)  # the dry run changed nothing


def test_the_drift_page_says_when_no_run_was_recorded(client, manny, cluster, monkeypatch):
    no_slurm(monkeypatch)
    client.force_login(manny)
    response = client.get(DRIFT)
    assert response.status_code == 200
    page = response.content.decode()
    assert "portal-dev" in page
    assert "No reconcile run has been recorded for this cluster yet" in page
    assert "As of " not in page


def test_a_manager_asks_for_a_run_now_and_it_is_queued(client, manny, cluster, monkeypatch):
    from accounts.tasks import reconcile_task

    queued = []
    monkeypatch.setattr(reconcile_task, "apply_async", lambda *a, **kw: queued.append(kw))
    no_slurm(monkeypatch)
    client.force_login(manny)
    assert b"Reconcile now" in client.get(DRIFT).content
    response = client.post(DRIFT, follow=True)
    assert response.redirect_chain == [(DRIFT, 302)]
    assert queued == [{"retry": False}]
    assert "A reconcile run is queued" in response.content.decode()


def test_a_run_now_with_the_broker_down_says_so(client, manny, cluster, monkeypatch):
    from kombu.exceptions import OperationalError

    from accounts.tasks import reconcile_task

    def down(*args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(reconcile_task, "apply_async", down)
    client.force_login(manny)
    response = client.post(DRIFT, follow=True)
    assert response.status_code == 200
    assert "does not answer" in response.content.decode()


def test_staff_who_may_only_view_allocations_cannot_ask_for_a_run(client, cluster, monkeypatch):
    from accounts.tasks import reconcile_task

    queued = []
    monkeypatch.setattr(reconcile_task, "apply_async", lambda *a, **kw: queued.append(kw))
    viewer = staff_with("vera", "view_allocation")
    client.force_login(viewer)
    page = client.get(DRIFT)
    assert page.status_code == 200 and b"Reconcile now" not in page.content
    assert client.post(DRIFT).status_code == 403
    assert queued == []


@pytest.mark.slurm
def test_the_drift_page_shows_a_project_bound_to_an_account_made_by_hand(
    client, manny, dev_cluster, monkeypatch
):
    import uuid

    from accounts.tasks import reconcile_task

    account = f"h{uuid.uuid4().hex[:10]}"
    sacctmgr_change("add", "account", account, check=True)
    try:
        granted_project(account, cluster=dev_cluster, manny=manny)
        reconcile_task()
        client.force_login(manny)
        no_slurm(monkeypatch)
        page = client.get(DRIFT).content.decode()
        assert f"{account}: the Slurm account exists but the portal did not create it" in page
        assert f"{account}: GrpTRESMins" not in page
    finally:
        sacctmgr_change("delete", "account", account)


def test_a_researcher_cannot_see_the_drift_report(client, alice):
    client.force_login(alice)
    assert client.get("/admin/accounts/allocation/slurm-drift/").status_code == 302


def test_adding_a_project_creates_it_and_its_members_through_the_services(
    client, manny, alice, caplog
):
    client.force_login(manny)
    data = form_data(client.get("/admin/accounts/project/add/"))
    data |= {"name": "Robotics", "slug": "robotics", "slurm_account": "robotics"}
    data |= {"memberships-TOTAL_FORMS": "1", "memberships-0-user": alice.pk}
    data |= {"memberships-0-role": "pi", "memberships-0-id": "", "memberships-0-project": ""}
    with caplog.at_level(logging.INFO, logger="accounts.services"):
        response = client.post("/admin/accounts/project/add/", data)
    assert response.status_code == 302, response.context["errors"]
    project = Project.objects.get(slug="robotics")
    assert project.slurm_account == "robotics"
    assert list(project.memberships.values_list("user__username", "role")) == [("alice", "pi")]
    entry = log_of(project)
    assert (entry.action_flag, entry.user) == (ADDITION, manny)
    assert "Added membership “alice in Robotics (PI)”." in entry.get_change_message()
    assert "project robotics created with Slurm account robotics by manny" in caplog.messages
    assert "project robotics: alice added as pi by manny" in caplog.messages


def test_a_projects_slurm_account_cannot_be_changed_in_the_console(client, manny, vision, caplog):
    client.force_login(manny)
    url = f"/admin/accounts/project/{vision.pk}/change/"
    response = client.get(url)
    assert b'name="slurm_account"' not in response.content
    assert b"vision" in response.content  # shown, read-only
    data = form_data(response) | {"name": "Vision Group", "slurm_account": "renamed"}
    with caplog.at_level(logging.INFO, logger="accounts.services"):
        assert client.post(url, data).status_code == 302
    vision.refresh_from_db()
    assert (vision.name, vision.slurm_account) == ("Vision Group", "vision")
    entry = log_of(vision)
    assert (entry.action_flag, entry.user, entry.get_change_message()) == (
        CHANGE,
        manny,
        "Changed Name.",
    )
    assert "project vision: name changed by manny" in caplog.messages


def test_memberships_change_through_the_services_and_the_log_says_how(
    client, manny, vision, alice, bob, charlie, caplog
):
    membership_set(project=vision, user=alice, role="pi")
    membership_set(project=vision, user=bob, role="member")
    client.force_login(manny)
    url = f"/admin/accounts/project/{vision.pk}/change/"
    data = form_data(client.get(url))
    row = {data[f"memberships-{i}-user"]: i for i in range(2)}
    data |= {
        f"memberships-{row[alice.pk]}-DELETE": "on",
        f"memberships-{row[bob.pk]}-role": "co_pi",
    }
    data |= {"memberships-TOTAL_FORMS": "3", "memberships-2-user": charlie.pk}
    data |= {"memberships-2-role": "member", "memberships-2-id": "", "memberships-2-project": ""}
    with caplog.at_level(logging.INFO, logger="accounts.services"):
        response = client.post(url, data)
    assert response.status_code == 302, response.context["errors"]
    assert dict(vision.memberships.values_list("user__username", "role")) == {
        "bob": "co_pi",
        "charlie": "member",
    }
    message = log_of(vision).get_change_message()
    assert "Added membership “charlie in Vision Lab (Member)”." in message
    assert "Changed Role for membership “bob in Vision Lab (Co-PI)”." in message
    assert "Deleted membership “alice in Vision Lab (PI)”." in message
    assert log_of(vision).user == manny
    assert {
        "project vision: alice removed by manny",
        "project vision: bob changed from member to co_pi by manny",
        "project vision: charlie added as member by manny",
    } <= set(caplog.messages)


def test_moving_a_membership_to_another_user_removes_the_first(client, manny, vision, alice, bob):
    membership_set(project=vision, user=alice, role="pi")
    client.force_login(manny)
    url = f"/admin/accounts/project/{vision.pk}/change/"
    data = form_data(client.get(url)) | {"memberships-0-user": bob.pk}
    assert client.post(url, data).status_code == 302
    assert list(vision.memberships.values_list("user__username", "role")) == [("bob", "pi")]


def test_staff_without_the_membership_permissions_cannot_change_members(client, vision, alice):
    membership_set(project=vision, user=alice, role="pi")
    sam = staff_with("sam", "view_project", "change_project", "view_membership")
    client.force_login(sam)
    url = f"/admin/accounts/project/{vision.pk}/change/"
    data = form_data(client.get(url)) | {"memberships-0-role": "member"}
    data |= {"memberships-0-DELETE": "on"}
    assert client.post(url, data).status_code == 302
    assert list(vision.memberships.values_list("user__username", "role")) == [("alice", "pi")]


def test_staff_who_may_only_view_projects_cannot_change_one(client, vision):
    sam = staff_with("sam", "view_project")
    client.force_login(sam)
    url = f"/admin/accounts/project/{vision.pk}/change/"
    data = form_data(client.get(url)) | {"name": "Taken over"}
    assert client.post(url, data).status_code == 403
    vision.refresh_from_db()
    assert vision.name == "Vision Lab"
    assert not LogEntry.objects.exists()


def revoke(client, allocation, **extra):
    return client.post(
        "/admin/accounts/allocation/",
        {"action": "revoke", "_selected_action": [allocation.pk], **extra},
        follow=True,
    )


def test_revoking_asks_for_the_reason_first(client, manny, allocation):
    client.force_login(manny)
    response = revoke(client, allocation)
    assert response.status_code == 200
    assert response.templates[0].name == "admin/accounts/allocation/revoke.html"
    assert b'name="reason"' in response.content
    assert str(allocation).encode() in response.content
    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.ACTIVE
    assert not LedgerEntry.objects.filter(kind="expire").exists()


def test_revoking_lapses_what_is_left_and_records_who_and_why(client, manny, allocation):
    ledger_hold(allocation=allocation, reference="token-1", gpu_seconds=10 * 3600)
    client.force_login(manny)
    response = revoke(client, allocation, post="yes", reason="Project ended early")
    assert b"revoked; 90.0 GPU-h lapsed." in response.content
    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.REVOKED
    assert (allocation.available_gpu_seconds, allocation.held_gpu_seconds) == (0, 10 * 3600)
    entry = LedgerEntry.objects.get(kind="expire")
    assert (entry.gpu_seconds, entry.actor, entry.reason, entry.reference) == (
        -90 * 3600,
        manny,
        "revoked: Project ended early",
        f"revoke:{allocation.pk}",
    )
    log = log_of(allocation)
    assert (log.action_flag, log.user) == (CHANGE, manny)
    assert log.change_message == "Revoked (90.0 GPU-h lapsed): Project ended early"
    # A repeat changes nothing more.
    response = revoke(client, allocation, post="yes", reason="again")
    assert b"already revoked" in response.content
    assert LedgerEntry.objects.filter(kind="expire").count() == 1
    assert LogEntry.objects.count() == 1


def test_revoking_an_allocation_with_nothing_left_still_records_why(manny, allocation):
    allocation_adjust(allocation=allocation, gpu_seconds=-100 * 3600, actor=manny, reason="all")
    entry = allocation_revoke(allocation=allocation, actor=manny, reason="closed")
    assert entry is not None
    assert (entry.gpu_seconds, entry.actor, entry.reason) == (0, manny, "revoked: closed")


def test_revoking_without_a_reason_is_refused_and_changes_nothing(client, manny, allocation):
    client.force_login(manny)
    response = revoke(client, allocation, post="yes", reason="  ")
    assert response.status_code == 200
    assert b"Say why the allocations are revoked; nothing was revoked." in response.content
    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.ACTIVE
    assert allocation.available_gpu_seconds == 100 * 3600
    assert not LedgerEntry.objects.filter(kind="expire").exists()
    assert not LogEntry.objects.exists()


def test_staff_who_may_only_view_allocations_cannot_revoke(client, allocation):
    sam = staff_with("sam", "view_allocation")
    client.force_login(sam)
    assert b'value="revoke"' not in client.get("/admin/accounts/allocation/").content
    revoke(client, allocation, post="yes", reason="not mine to revoke")
    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.ACTIVE
    assert not LedgerEntry.objects.filter(kind="expire").exists()


def test_an_allocation_manager_sees_posix_usernames_but_cannot_change_them(client, manny, alice):
    client.force_login(manny)  # the group may view users, not change them
    url = f"/admin/accounts/user/{alice.pk}/change/"
    response = client.get(url)
    assert response.status_code == 200
    assert b'name="posix_username"' not in response.content
    assert client.post(url, {"posix_username": "root"}).status_code == 403
    alice.refresh_from_db()
    assert alice.posix_username == "alice"


def test_staff_with_the_change_user_permission_set_posix_usernames(client, alice):
    admin = staff_with("ada", "view_user", "change_user")
    client.force_login(admin)
    url = f"/admin/accounts/user/{alice.pk}/change/"
    response = client.get(url)
    assert b'name="posix_username"' in response.content
    response = client.post(url, form_data(response) | {"posix_username": "alice2"})
    assert response.status_code == 302, response.context["errors"]
    alice.refresh_from_db()
    assert alice.posix_username == "alice2"
    assert log_of(alice).user == admin


@pytest.mark.parametrize(
    ("login", "says"),
    [
        ("root", "root is a system account: jobs never run as it."),
        ("daemon", "daemon is a system account here (uid 1, below 1000)"),
        ("Root;", "A POSIX user name"),
    ],
)
def test_the_console_refuses_root_and_system_accounts_as_posix_usernames(
    client, alice, login, says
):
    admin = staff_with("ada", "view_user", "change_user")
    client.force_login(admin)
    url = f"/admin/accounts/user/{alice.pk}/change/"
    response = client.post(url, form_data(client.get(url)) | {"posix_username": login})
    assert response.status_code == 200
    assert says in response.content.decode()
    alice.refresh_from_db()
    assert alice.posix_username == "alice"


def test_a_project_cannot_be_bound_to_slurms_root_account(client, manny):
    with pytest.raises(ValidationError, match="root is Slurm's top account"):
        project_create(slug="rooted", name="Rooted", slurm_account="root")
    client.force_login(manny)
    data = form_data(client.get("/admin/accounts/project/add/"))
    data |= {"name": "Rooted", "slug": "rooted", "slurm_account": "root"}
    response = client.post("/admin/accounts/project/add/", data)
    assert response.status_code == 200
    assert "root is Slurm&#x27;s top account and no project&#x27;s" in response.content.decode()
    assert not Project.objects.filter(slug="rooted").exists()


def test_a_manager_cannot_make_themselves_a_lead_of_a_project_in_the_console(
    client, manny, vision, alice
):
    """Found from outside: manny posted vision's change form with a row naming himself
    co-PI and then read alice's job output. The page refuses it and says who may."""
    from accounts.groups import ALLOCATION_MANAGERS
    from audit.models import AuditEvent

    client.force_login(manny)
    url = f"/admin/accounts/project/{vision.pk}/change/"
    data = form_data(client.get(url))
    extra = int(data["memberships-TOTAL_FORMS"])
    data |= {
        "memberships-TOTAL_FORMS": str(extra + 1),
        f"memberships-{extra}-user": manny.pk,
        f"memberships-{extra}-role": "co_pi",
        f"memberships-{extra}-id": "",
        f"memberships-{extra}-project": vision.pk,
    }
    response = client.post(url, data)
    assert response.status_code == 200
    assert "You cannot add yourself to a project" in response.content.decode()
    assert not vision.memberships.filter(user=manny).exists()
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.MEMBERSHIP_ADD).exists()

    # Another manager may, and it is recorded as theirs.
    maria = user_create(username="maria", password="maria-pass-1234", is_staff=True)
    maria.groups.add(Group.objects.get(name=ALLOCATION_MANAGERS))
    client.force_login(maria)
    response = client.post(url, data)
    assert response.status_code == 302, response.context["errors"]
    added = AuditEvent.objects.get(action=AuditEvent.Action.MEMBERSHIP_ADD)
    assert (added.actor, added.on_behalf_of) == (maria, manny)

    # Nor does he change his own row once he is in.
    client.force_login(manny)
    data = form_data(client.get(url))
    row = next(i for i in range(extra + 1) if data[f"memberships-{i}-user"] == manny.pk)
    response = client.post(url, data | {f"memberships-{row}-role": "pi"})
    assert "You cannot add yourself to a project" in response.content.decode()
    assert vision.memberships.get(user=manny).role == "co_pi"


def test_nobody_but_a_superuser_grants_themselves_a_membership(manny, vision, alice):
    with pytest.raises(NotAllowed, match="another allocation manager or a superuser"):
        membership_set(project=vision, user=manny, role="pi", actor=manny)
    with pytest.raises(NotAllowed):
        membership_set(project=vision, user=alice, role="pi", actor=alice)
    root = User.objects.create_superuser("root", password="root-pass-1234")
    membership_set(project=vision, user=root, role="member", actor=root)
    assert vision.memberships.filter(user=root).exists()


def test_the_console_shows_managers_a_job_without_its_script_environment_or_token(
    client, manny, vision, alice, cluster
):
    from jobs.models import Job

    partition = cluster.partitions.first() or cluster.partitions.create(name="gpu")
    job = Job.objects.create(
        owner=alice, project=vision, cluster=cluster, partition=partition, name="train",
        time_limit_minutes=10, working_directory="/home/alice/w", output_path="o",
        error_path="e", environment={"WANDB_API_KEY": "s3cr3t-env"},
        script="echo s3cr3t-script\n", rendered_script="#!/bin/bash\necho s3cr3t-rendered\n",
        billing_weight=1, requested_gpu_seconds=600,
    )  # fmt: skip
    client.force_login(manny)
    page = client.get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
    assert "train" in page and "alice" in page
    for secret in ("s3cr3t-env", "s3cr3t-script", "s3cr3t-rendered", str(job.submit_token)):
        assert secret not in page
