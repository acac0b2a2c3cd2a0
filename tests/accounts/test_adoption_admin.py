"""The console's Slurm import page: the stored listing, no Slurm call, adopting from it."""

import pytest
from django.contrib.admin.models import LogEntry
from django.utils import timezone

from accounts.models import AdoptedAccount, Project, SlurmAccountListing
from accounts.services import membership_set, project_create
from audit.models import AuditEvent
from clusters.services import cluster_register
from tests.accounts.test_admin import no_slurm, staff_with
from tests.factories import listed_account_row

IMPORT = "/admin/accounts/adoptedaccount/slurm-import/"


row = listed_account_row


@pytest.fixture
def cluster(db):
    return cluster_register(name="portal-dev")


@pytest.fixture
def listing(cluster, alice):
    """As a worker stored it: an account of a project's name, one of no project's, the
    portal's own and one whose name no project may have."""
    lattice = project_create(slug="lattice", name="Lattice", slurm_account="lattice")
    membership_set(project=lattice, user=alice, role="pi")
    return SlurmAccountListing.objects.create(
        cluster=cluster,
        listed_at=timezone.now(),
        accounts=[
            row(
                "lattice",
                project="lattice",
                others=["charlie"],
                changes=["lattice: add user alice", "lattice: GrpTRESMins gres/gpu 5000 → 600"],
            ),
            row("physics"),
            row("vision", organization="portal", users=[]),
            row("Odd.Name", problem="A Slurm account: lower-case letters…"),
        ],
    )


def adopt_url(cluster, account: str) -> str:
    return f"{IMPORT}{cluster.pk}/{account}/"


def test_a_manager_sees_the_last_listing_and_what_adopting_would_change(
    client, manny, listing, monkeypatch
):
    no_slurm(monkeypatch)
    client.force_login(manny)
    assert b"Slurm import" in client.get("/admin/accounts/allocation/").content
    response = client.get(IMPORT)
    assert response.status_code == 200
    page = response.content.decode()
    assert "As of " in page and "The portal creates its accounts under root." in page
    assert "lattice: GrpTRESMins gres/gpu 5000 → 600" in page
    assert "kept unless you confirm their removal: charlie" in page
    assert "No project has its name: adopting it makes one." in page
    assert "The portal's own account." in page
    assert "lower-case letters" in page
    assert adopt_url(listing.cluster, "lattice") in page
    assert adopt_url(listing.cluster, "physics") in page
    assert adopt_url(listing.cluster, "vision") not in page


def test_the_page_says_when_nothing_was_listed_yet(client, manny, cluster, monkeypatch):
    no_slurm(monkeypatch)
    client.force_login(manny)
    page = client.get(IMPORT).content.decode()
    assert "The cluster's accounts have not been listed yet." in page


def test_adopting_into_the_project_of_its_name_records_who_and_when(
    client, manny, listing, monkeypatch
):
    no_slurm(monkeypatch)
    client.force_login(manny)
    url = adopt_url(listing.cluster, "lattice")
    page = client.get(url).content.decode()
    assert "lattice: add user alice" in page and "New project" not in page
    response = client.post(url, {"remove_other_users": ""}, follow=True)
    assert response.redirect_chain == [(IMPORT, 302)]
    assert "is adopted into Lattice" in response.content.decode()
    adoption = AdoptedAccount.objects.get()
    assert (adoption.account, adoption.project.slug, adoption.adopted_by) == (
        "lattice",
        "lattice",
        manny,
    )
    assert not adoption.remove_other_users and adoption.kept_users == ["charlie"]
    assert AuditEvent.objects.get(action="slurm_account.adopt").actor_id == manny.pk
    assert LogEntry.objects.filter(object_id=str(adoption.pk)).exists()
    assert "Adopted into Lattice." in client.get(IMPORT).content.decode()
    # The form is gone, and a second post adopts nothing more.
    client.post(url, {"remove_other_users": "on"})
    assert AdoptedAccount.objects.get().remove_other_users is False


def test_adopting_into_a_new_project_makes_it_with_its_pi(client, manny, alice, listing):
    client.force_login(manny)
    url = adopt_url(listing.cluster, "physics")
    response = client.post(
        url, {"slug": "physics", "name": "Physics", "pi": "nobody", "remove_other_users": "on"}
    )
    assert response.status_code == 200 and "No active user has that user name." in (
        response.content.decode()
    )
    response = client.post(
        url, {"slug": "physics", "name": "Physics", "pi": "alice", "remove_other_users": "on"}
    )
    assert response.status_code == 302
    project = Project.objects.get(slug="physics")
    assert (project.slurm_account, project.description) == ("physics", "lattice qcd")
    assert project.memberships.get().user == alice
    adoption = AdoptedAccount.objects.get(project=project)
    assert adoption.remove_other_users and adoption.kept_users == []


def test_a_manager_asks_for_a_new_listing_and_it_is_queued(client, manny, cluster, monkeypatch):
    from accounts.tasks import account_listing_task

    queued = []
    monkeypatch.setattr(account_listing_task, "apply_async", lambda *a, **kw: queued.append(kw))
    no_slurm(monkeypatch)
    client.force_login(manny)
    response = client.post(IMPORT, follow=True)
    assert response.redirect_chain == [(IMPORT, 302)] and queued == [{"retry": False}]


def test_researchers_and_staff_without_the_permission_cannot_see_or_adopt(client, alice, listing):
    client.force_login(alice)
    for url in (IMPORT, adopt_url(listing.cluster, "physics")):
        assert client.get(url).status_code == 302  # to the console's log-in
        assert client.post(url, {"slug": "x", "name": "x"}).status_code == 302
    client.force_login(staff_with("viewer", "view_adoptedaccount"))
    assert client.get(IMPORT).status_code == 200
    assert client.post(IMPORT).status_code == 403
    assert client.get(adopt_url(listing.cluster, "physics")).status_code == 403
    assert not AdoptedAccount.objects.exists()


@pytest.mark.parametrize(
    "url",
    [
        IMPORT + "?cluster=nope&o=9&e=1",
        IMPORT + "?q=%00",
        "/admin/accounts/adoptedaccount/?cluster__id__exact=abc",
        "/admin/accounts/adoptedaccount/?remove_other_users__exact=maybe&o=zz",
        "/admin/accounts/adoptedaccount/?q=%27%22%00",
        IMPORT + "999999/physics/",
        IMPORT + "{cluster}/absent/",
        IMPORT + "{cluster}/Odd.Name/?slug=%00",
    ],
)
def test_no_query_string_makes_the_pages_fail(client, manny, listing, url):
    client.force_login(manny)
    status = client.get(url.format(cluster=listing.cluster.pk)).status_code
    assert status in (200, 302, 400, 404)  # a NUL: the console answers 400
