"""The console's Slurm drift page lists, under each cluster, the records Slurm listed
that the portal refused, as the syncs kept them: users' bytes shown escaped, so a
crafted name cannot make the page say anything else; the page asks Slurm nothing."""

import datetime as dt

import pytest
from django.utils import timezone

from accounts.admin.allocations import REFUSED_SHOWN
from clusters.models import RefusedRecord
from clusters.services import cluster_register, refused_records_report
from clusters.slurm.types import Refused
from tests.accounts.test_admin import DRIFT, no_slurm

QUEUE, ACCOUNTING = RefusedRecord.Listing.QUEUE, RefusedRecord.Listing.ACCOUNTING

# A job name as a researcher can write it: a line's end, Slurm's record and unit
# separators, markup, a terminal's escape and a right-to-left override.
HOSTILE = (
    "inj\n<script>alert(1)</script>\x1e987650001\x1folga\x1fgenomics\x1fCOMPLETED"
    "\x1b[2J\u202edetareneg"
)


@pytest.fixture
def clusters(db):
    return cluster_register(name="portal-dev"), cluster_register(name="portal-next")


def page(client, user) -> str:
    client.force_login(user)
    response = client.get(DRIFT)
    assert response.status_code == 200
    return response.content.decode()


def section(html: str, cluster: str) -> str:
    """The part of the page under the cluster's heading."""
    after = html.split(f"<h2>{cluster}</h2>", 1)[1]
    return after.split("<h2>", 1)[0]


def test_a_manager_sees_each_refused_record_under_its_cluster_escaped(
    client, manny, clusters, monkeypatch
):
    dev, _ = clusters
    refused_records_report(
        cluster=dev,
        listing=ACCOUNTING,
        refused=[Refused(job_id=31337, problem="cannot read the record: 14 fields", text=HOSTILE)],
    )
    refused_records_report(
        cluster=dev,
        listing=ACCOUNTING,
        refused=[Refused(job_id=31337, problem="cannot read the record: 14 fields", text=HOSTILE)],
    )
    no_slurm(monkeypatch)
    html = page(client, manny)
    dev_part = section(html, "portal-dev")
    assert "Records Slurm listed that the portal refused" in dev_part
    assert "<td>31337</td><td>accounting</td><td>cannot read the record: 14 fields</td>" in dev_part
    assert (
        "<code>inj\\n&lt;script&gt;alert(1)&lt;/script&gt;\\x1e987650001\\x1folga\\x1fgenomics"
        "\\x1fCOMPLETED\\x1b[2J\\u202edetareneg</code>"
    ) in dev_part
    assert "<td>2</td>" in dev_part  # times seen
    # None of the user's bytes reaches the page as itself.
    for raw in ("<script>", "\x1e", "\x1f", "\x1b", "\u202e", "inj\n"):
        assert raw not in html, repr(raw)
    assert "Slurm listed nothing the portal refused in the last day." in section(
        html, "portal-next"
    )


def test_an_excerpt_shows_where_slurms_padding_was_and_stops_at_its_length(client, manny, clusters):
    dev, _ = clusters
    record = "22008" + " " * 20 + "alice" + " " * 59 + "vision " + "x" * 400
    refused_records_report(
        cluster=dev,
        listing=QUEUE,
        refused=[Refused(job_id=22008, problem="job 22008 is listed 2 times", text=record)],
    )
    dev_part = section(page(client, manny), "portal-dev")
    excerpt = dev_part.split("<code>", 1)[1].split("</code>", 1)[0]
    assert excerpt.startswith("22008 alice vision xxx")
    assert excerpt.endswith("x…") and len(excerpt) == 161


def test_records_not_seen_within_the_day_are_not_listed(client, manny, clusters):
    dev, _ = clusters
    refused_records_report(
        cluster=dev, listing=QUEUE, refused=[Refused(job_id=5, problem="old", text="x")]
    )
    RefusedRecord.objects.update(last_seen_at=timezone.now() - dt.timedelta(days=1, minutes=1))
    dev_part = section(page(client, manny), "portal-dev")
    assert "Slurm listed nothing the portal refused in the last day." in dev_part
    assert "<td>5</td>" not in dev_part


def test_past_the_first_ones_it_says_how_many_more_and_links_to_all(client, manny, clusters):
    dev, _ = clusters
    refused_records_report(
        cluster=dev,
        listing=QUEUE,
        refused=[
            Refused(job_id=job_id, problem=f"job {job_id} is listed 2 times", text="x")
            for job_id in range(REFUSED_SHOWN + 2)
        ],
    )
    dev_part = section(page(client, manny), "portal-dev")
    assert dev_part.count("<tr>") == REFUSED_SHOWN + 1  # and the heading's
    assert "2 more are not shown here." in dev_part
    assert f"/admin/clusters/refusedrecord/?cluster__id__exact={dev.pk}" in dev_part


def test_a_researcher_cannot_open_the_page(client, alice, clusters):
    dev, _ = clusters
    refused_records_report(
        cluster=dev, listing=QUEUE, refused=[Refused(job_id=5, problem="p", text=HOSTILE)]
    )
    client.force_login(alice)
    response = client.get(DRIFT)
    assert response.status_code == 302 and "/login/" in response["Location"]
