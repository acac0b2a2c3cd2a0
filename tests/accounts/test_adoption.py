"""Adopting a cluster that already runs: accounts made by hand with sacctmgr on the live
dev cluster are listed, left alone, adopted into a project and then managed."""

import datetime as dt
import uuid

import pytest
from django.core.management import call_command

from accounts.adoption import account_adopt, account_listing_refresh
from accounts.errors import Refused
from accounts.ledger import allocation_grant
from accounts.models import AdoptedAccount, Membership, Project, SlurmAccountListing
from accounts.reconcile import reconcile
from accounts.services import membership_set, project_create
from audit.models import AuditEvent
from clusters.slurm import client_for
from tests.slurm_accounts import DEV, DEV_CLUSTER, account_remove, sacctmgr_change

TODAY = dt.date.today()
CLUSTER = f"cluster={DEV_CLUSTER}"
# The site's own user of the accounts made by hand: a Slurm user of these tests alone
# (sacctmgr needs no Unix account for it). Its first association becomes its default
# account, which Slurm will not delete while the user has it: the user goes first.
SITE_USER = f"site{uuid.uuid4().hex[:8]}"


def made_by_hand(account: str, *, users=(SITE_USER,), parent: str = "root") -> None:
    """An account a site made with sacctmgr: its own organization, users and a limit."""
    sacctmgr_change(
        "add", "account", account, CLUSTER, f"parent={parent}", "organization=physics",
        "description=Lattice QCD", check=True,
    )  # fmt: skip
    for user in users:
        sacctmgr_change("add", "user", user, f"account={account}", CLUSTER, check=True)
    sacctmgr_change(
        "modify", "account", "where", f"name={account}", CLUSTER, "set",
        "GrpTRESMins=gres/gpu=5000", "MaxSubmitJobs=50", check=True,
    )  # fmt: skip


@pytest.fixture
def accounts():
    """Names for the test's accounts, unique to it; each removed from Slurm afterwards
    (children first)."""
    made: list[str] = []

    def name() -> str:
        made.append(f"adopt{uuid.uuid4().hex[:10]}")
        return made[-1]

    yield name
    if DEV.run("sacctmgr", "-n", "-P", "show", "user", SITE_USER, "format=User").stdout.strip():
        sacctmgr_change("delete", "user", "where", f"name={SITE_USER}")
    for account in reversed(made):
        account_remove(account)


def granted(project: Project, cluster, gpu_hours: int = 10) -> Project:
    allocation_grant(
        project=project,
        cluster=cluster,
        gpu_hours=gpu_hours,
        starts_on=TODAY - dt.timedelta(days=1),
        ends_on=TODAY + dt.timedelta(days=30),
        actor=None,
        reason="test",
    )
    return project


@pytest.fixture
def lattice(accounts, dev_cluster, alice, bob):
    """A hand-made account (the site's user associated, 5000 GPU-minutes) and a project of its
    name with alice and bob and 10 GPU-hours on the dev cluster."""
    account = accounts()
    made_by_hand(account)
    project = project_create(slug=account, name="Lattice QCD", slurm_account=account)
    membership_set(project=project, user=alice, role="pi")
    membership_set(project=project, user=bob, role="member")
    return granted(project, dev_cluster)


def row_of(listing: SlurmAccountListing, account: str) -> dict:
    return next(row for row in listing.accounts if row["name"] == account)


@pytest.mark.slurm
def test_an_account_made_by_hand_is_listed_left_alone_then_adopted_and_managed(
    lattice, accounts, dev_cluster, manny
):
    account = lattice.slurm_account
    untouched = accounts()  # another site account nobody adopts
    made_by_hand(untouched, users=("alice",))
    client = client_for(dev_cluster)

    listing = account_listing_refresh(cluster=dev_cluster)
    row = row_of(listing, account)
    assert (row["organization"], row["parent"], row["users"]) == ("physics", "root", [SITE_USER])
    assert row["limits"]["gpu_minutes"] == 5000 and row["limits"]["max_submit_jobs"] == 50
    assert row["project"] == account and row["others"] == [SITE_USER]
    assert row["changes"] == [
        f"{account}: add user alice",
        f"{account}: add user bob",
        f"{account}: GrpTRESMins gres/gpu 5000 → 600",
        f"{account}: GrpTRESMins cpu None → 60000",
        f"{account}: MaxSubmitJobs 50 → 1000",
    ]
    assert row_of(listing, untouched)["project"] is None
    assert client.account_limits(account).users == (SITE_USER,)  # listing changed nothing

    # Before adoption the reconciler reports the account and changes nothing in it.
    report = reconcile(cluster=dev_cluster)
    assert [a for a in report.actions if a.account == account] == []
    assert any(e.startswith(f"{account}: ") and "nobody adopted it" in e for e in report.errors)
    assert client.account_limits(account).gpu_minutes == 5000

    adoption = account_adopt(cluster=dev_cluster, account=account, project=lattice, actor=manny)
    assert (adoption.adopted_by, adoption.project, adoption.remove_other_users) == (
        manny,
        lattice,
        False,
    )
    assert adoption.kept_users == [SITE_USER]
    event = AuditEvent.objects.get(action=AuditEvent.Action.ACCOUNT_ADOPT)
    assert (event.actor_id, event.scope) == (manny.pk, account)
    assert event.detail["users"] == [SITE_USER] and event.detail["cluster"] == DEV_CLUSTER
    # A repeat has no second effect.
    assert account_adopt(cluster=dev_cluster, account=account, project=lattice, actor=manny) == (
        adoption
    )
    assert AuditEvent.objects.filter(action=AuditEvent.Action.ACCOUNT_ADOPT).count() == 1

    report = reconcile(cluster=dev_cluster)
    assert [str(a) for a in report.actions if a.account == account] == row["changes"]
    assert not [e for e in report.errors if e.startswith(f"{account}:")]
    assert any(w.startswith(f"{account}: {SITE_USER} is associated") for w in report.warnings)
    limits = client.account_limits(account)
    assert limits.users == ("alice", "bob", SITE_USER)  # the site's user is kept
    assert (limits.gpu_minutes, limits.cpu_minutes, limits.max_submit_jobs) == (600, 60000, 1000)
    assert client.account_organization(account) == "physics"  # still the site's account
    # The one nobody adopted is as the site left it.
    other = client.account_limits(untouched)
    assert (other.users, other.gpu_minutes, other.max_submit_jobs) == (("alice",), 5000, 50)
    assert [a for a in reconcile(cluster=dev_cluster).actions if a.account == account] == []


@pytest.mark.slurm
def test_a_member_who_leaves_an_adopted_account_loses_it_and_the_sites_user_stays(
    lattice, dev_cluster, manny, bob
):
    account = lattice.slurm_account
    account_listing_refresh(cluster=dev_cluster)
    account_adopt(cluster=dev_cluster, account=account, project=lattice, actor=manny)
    reconcile(cluster=dev_cluster)
    Membership.objects.filter(project=lattice, user=bob).delete()
    report = reconcile(cluster=dev_cluster)
    assert [str(a) for a in report.actions if a.account == account] == [
        f"{account}: remove user bob"
    ]
    assert client_for(dev_cluster).account_limits(account).users == ("alice", SITE_USER)


@pytest.mark.slurm
def test_an_adoption_that_confirms_it_removes_the_users_who_are_not_members(
    lattice, dev_cluster, manny
):
    account = lattice.slurm_account
    account_listing_refresh(cluster=dev_cluster)
    account_adopt(
        cluster=dev_cluster,
        account=account,
        project=lattice,
        actor=manny,
        remove_other_users=True,
    )
    report = reconcile(cluster=dev_cluster)
    assert f"{account}: remove user {SITE_USER}" in [str(a) for a in report.actions]
    assert client_for(dev_cluster).account_limits(account).users == ("alice", "bob")


@pytest.mark.slurm
def test_the_command_lists_as_a_dry_run_and_adopts_into_a_new_project(
    accounts, dev_cluster, alice, manny, capsys
):
    account = accounts()
    made_by_hand(account)
    call_command("import_accounts", "--cluster", DEV_CLUSTER)
    out = capsys.readouterr().out
    assert f"{account} (organization physics, parent root): lattice qcd" in out
    assert "no project has its name: adopt with --new-project" in out
    assert "Dry run: nothing was changed." in out
    assert not AdoptedAccount.objects.exists()

    call_command(
        "import_accounts", "--cluster", DEV_CLUSTER, "--adopt", account, "--new-project",
        account, "--name", "Lattice", "--pi", "alice", "--by", "manny",
    )  # fmt: skip
    assert f"Adopted {account} on {DEV_CLUSTER} into project {account}" in capsys.readouterr().out
    project = Project.objects.get(slug=account)
    assert (project.name, project.slurm_account, project.description) == (
        "Lattice",
        account,
        "lattice qcd",
    )
    assert list(project.memberships.values_list("user__username", "role")) == [("alice", "pi")]
    assert AdoptedAccount.objects.get().adopted_by == manny
    # Once it has hours the reconciler adds its PI and keeps the site's user.
    granted(project, dev_cluster, gpu_hours=1)
    reconcile(cluster=dev_cluster)
    limits = client_for(dev_cluster).account_limits(account)
    assert (limits.users, limits.gpu_minutes) == (("alice", SITE_USER), 60)


@pytest.mark.slurm
def test_the_portals_accounts_go_under_the_clusters_parent_and_a_missing_one_is_reported(
    accounts, dev_cluster, alice
):
    parent = accounts()
    project = project_create(slug=f"p{parent}", name="New", slurm_account=accounts())
    membership_set(project=project, user=alice, role="pi")
    granted(project, dev_cluster)
    dev_cluster.parent_account = parent
    dev_cluster.save(update_fields=["parent_account"])
    for dry_run in (True, False):
        report = reconcile(cluster=dev_cluster, dry_run=dry_run)
        [error] = [e for e in report.errors if e.startswith(f"{project.slurm_account}:")]
        assert f"the cluster's parent account {parent!r} does not exist on {DEV_CLUSTER}" in error
        assert [a for a in report.actions if a.account == project.slurm_account] == []
    sacctmgr_change("add", "account", parent, CLUSTER, check=True)
    assert reconcile(cluster=dev_cluster).errors == []
    listed = {a.name: a for a in client_for(dev_cluster).list_accounts()}
    assert listed[project.slurm_account].parent == parent
    assert listed[project.slurm_account].organization == "portal"


@pytest.mark.slurm
def test_what_cannot_be_adopted_is_refused_saying_why(lattice, accounts, dev_cluster, manny):
    account = lattice.slurm_account
    with pytest.raises(Refused, match="not in the last listing"):
        account_adopt(cluster=dev_cluster, account=account, project=lattice, actor=manny)
    reconcile(cluster=dev_cluster)  # a project's account the portal makes: its own
    own = project_create(slug="own", name="Own", slurm_account=accounts())
    granted(own, dev_cluster)
    reconcile(cluster=dev_cluster)
    account_listing_refresh(cluster=dev_cluster)
    with pytest.raises(Refused, match="the portal's own account"):
        account_adopt(cluster=dev_cluster, account=own.slurm_account, project=own, actor=manny)
    with pytest.raises(Refused, match="has the Slurm account"):
        account_adopt(cluster=dev_cluster, account=account, project=own, actor=manny)
    with pytest.raises(Refused, match="already has the Slurm account"):
        account_adopt(cluster=dev_cluster, account=account, new_project_slug="x", actor=manny)
    with pytest.raises(Refused, match="either an existing project or a new one"):
        account_adopt(cluster=dev_cluster, account=account, actor=manny)
    assert not AdoptedAccount.objects.exists()
