"""Partitions in the console: Slurm's fields read-only, the billing weight and the CPU-hour
rate through services with a reason that the admin log keeps."""

import logging
from decimal import Decimal

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission

from accounts.services import user_create
from clusters.models import Partition, RefusedRecord
from clusters.services import cluster_register, refused_records_report
from clusters.slurm.types import Refused


@pytest.fixture
def partition(db):
    cluster = cluster_register(name="portal-dev")
    return Partition.objects.create(cluster=cluster, name="gpu", gpus_per_node=8, total_gpus=8)


def url_of(partition):
    return f"/admin/clusters/partition/{partition.pk}/change/"


def test_the_billing_weight_changes_through_the_service_and_the_log_says_why(
    client, manny, partition, caplog
):
    client.force_login(manny)
    with caplog.at_level(logging.INFO, logger="clusters.services"):
        response = client.post(
            url_of(partition),
            {"billing_weight": "2.5", "cpu_hour_rate": "0.01", "reason": " A100s cost more "},
        )
    assert response.status_code == 302
    partition.refresh_from_db()
    assert partition.billing_weight == Decimal("2.500")
    entry = LogEntry.objects.get(object_id=str(partition.pk))
    assert (entry.user, entry.get_change_message()) == (
        manny,
        "Billing weight 1.000 → 2.500: A100s cost more",
    )
    assert caplog.messages == [
        "partition portal-dev/gpu: billing weight 1.000 -> 2.500 by manny: A100s cost more"
    ]


def test_a_new_billing_weight_without_a_reason_is_refused(client, manny, partition):
    client.force_login(manny)
    response = client.post(
        url_of(partition), {"billing_weight": "2.5", "cpu_hour_rate": "0.01", "reason": "  "}
    )
    assert response.status_code == 200
    assert b"Say why the billing weight changes" in response.content
    partition.refresh_from_db()
    assert partition.billing_weight == Decimal("1.000")
    assert not LogEntry.objects.exists()


def test_slurms_fields_are_read_only(client, manny, partition):
    client.force_login(manny)
    page = client.get(url_of(partition)).content
    assert b'name="billing_weight"' in page and b'name="reason"' in page
    assert b'name="cpu_hour_rate"' in page
    for field in [b"name", b"is_up", b"gpus_per_node", b"max_time_minutes", b"cluster"]:
        assert b'name="' + field + b'"' not in page
    data = {
        "billing_weight": "1.000",
        "cpu_hour_rate": "0.0100",
        "name": "hacked",
        "is_up": "",
        "gpus_per_node": "99",
    }
    assert client.post(url_of(partition), data).status_code == 302
    partition.refresh_from_db()
    assert (partition.name, partition.is_up, partition.gpus_per_node) == ("gpu", True, 8)


def test_the_cpu_hour_rate_changes_through_the_service_with_a_reason(
    client, manny, partition, caplog
):
    client.force_login(manny)
    refused = client.post(
        url_of(partition), {"billing_weight": "1", "cpu_hour_rate": "0.02", "reason": ""}
    )
    assert refused.status_code == 200
    assert b"Say why the cpu hour rate changes" in refused.content
    with caplog.at_level(logging.INFO, logger="clusters.services"):
        response = client.post(
            url_of(partition),
            {"billing_weight": "1", "cpu_hour_rate": "0.02", "reason": "new CPUs"},
        )
    assert response.status_code == 302
    partition.refresh_from_db()
    assert (partition.billing_weight, partition.cpu_hour_rate) == (Decimal(1), Decimal("0.02"))
    entry = LogEntry.objects.get(object_id=str(partition.pk))
    assert entry.get_change_message() == "Cpu hour rate 0.0100 → 0.0200: new CPUs"
    assert caplog.messages == [
        "partition portal-dev/gpu: cpu hour rate 0.0100 -> 0.0200 by manny: new CPUs"
    ]


def test_a_cpu_hour_rate_of_zero_is_refused_no_job_is_free(client, manny, partition):
    client.force_login(manny)
    response = client.post(
        url_of(partition), {"billing_weight": "1", "cpu_hour_rate": "0", "reason": "free CPUs"}
    )
    assert response.status_code == 200
    partition.refresh_from_db()
    assert partition.cpu_hour_rate == Decimal("0.0100")


def test_partitions_are_not_added_in_the_console(client, manny, partition):
    client.force_login(manny)
    assert client.get("/admin/clusters/partition/add/").status_code == 403


def test_staff_who_may_only_view_partitions_cannot_change_the_weight(client, partition):
    sam = user_create(username="sam", password="pw-sam-12345", is_staff=True)
    sam.user_permissions.set(Permission.objects.filter(codename="view_partition"))
    client.force_login(sam)
    response = client.post(
        url_of(partition), {"billing_weight": "9", "cpu_hour_rate": "1", "reason": "mine now"}
    )
    assert response.status_code == 403
    partition.refresh_from_db()
    assert partition.billing_weight == Decimal("1.000")
    assert partition.cpu_hour_rate == Decimal("0.0100")


def test_the_cluster_page_shows_the_weights_without_editing_them(client, partition):
    root = user_create(username="root", password="pw-root-12345", is_staff=True)
    root.is_superuser = True
    root.save()
    client.force_login(root)
    page = client.get(f"/admin/clusters/cluster/{partition.cluster_id}/change/").content
    assert b'name="partitions-0-billing_weight"' not in page
    assert b'name="partitions-0-cpu_hour_rate"' not in page
    assert url_of(partition).encode() in page  # the way to change it, with a reason


# --- records Slurm listed that the portal refused: read-only, for managers ------------------

REFUSED_LIST = "/admin/clusters/refusedrecord/"


@pytest.fixture
def refused(db):
    cluster = cluster_register(name="portal-dev")
    problem = "cannot read the record: 14 fields, not 15"
    refused_records_report(
        cluster=cluster,
        listing=RefusedRecord.Listing.ACCOUNTING,
        refused=[Refused(job_id=31337, problem=problem, text="inj\n<b>x</b>\x1e9\x1folga")],
    )
    refused_records_report(
        cluster=cluster,
        listing=RefusedRecord.Listing.QUEUE,
        refused=[Refused(job_id=4242, problem="job 4242 is listed 2 times", text="x")],
    )
    return RefusedRecord.objects.get(slurm_job_id=31337)


def test_a_manager_lists_refused_records_and_finds_one_by_its_job_id(client, manny, refused):
    client.force_login(manny)
    listing = client.get(REFUSED_LIST)
    assert listing.status_code == 200
    page = listing.content.decode()
    assert "31337" in page and "4242" in page
    assert "cannot read the record: 14 fields, not 15" in page
    found = client.get(REFUSED_LIST, {"q": "31337"}).content.decode()
    assert "31337" in found and "4242" not in found
    for term in ("abc", "1" * 30, "-1", "%"):  # any term is a search, never an error
        assert client.get(REFUSED_LIST, {"q": term}).status_code == 200, term
    queue_only = client.get(REFUSED_LIST, {"listing__exact": "queue"}).content.decode()
    assert "4242" in queue_only and "31337" not in queue_only


def test_a_refused_records_page_shows_its_text_escaped_and_nothing_to_edit(client, manny, refused):
    client.force_login(manny)
    url = f"{REFUSED_LIST}{refused.pk}/change/"
    page = client.get(url).content.decode()
    assert "inj\\n&lt;b&gt;x&lt;/b&gt;\\x1e9\\x1folga" in page
    assert "<b>x</b>" not in page and "\x1e" not in page
    assert 'name="problem"' not in page and 'name="_save"' not in page
    assert client.post(url, {"problem": "nothing"}).status_code == 403
    assert client.get(f"{REFUSED_LIST}add/").status_code == 403
    assert client.post(f"{REFUSED_LIST}{refused.pk}/delete/", {"post": "yes"}).status_code == 403
    refused.refresh_from_db()
    assert refused.problem == "cannot read the record: 14 fields, not 15"


def test_a_researcher_cannot_open_the_refused_records(client, alice, refused):
    client.force_login(alice)
    for url in (REFUSED_LIST, f"{REFUSED_LIST}{refused.pk}/change/"):
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"], url
