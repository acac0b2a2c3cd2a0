"""A new billing weight or CPU-hour rate is recorded with the old and new values and why."""

from audit.models import AuditEvent
from tests.audit.conftest import events, only


def url_of(partition):
    return f"/admin/clusters/partition/{partition.pk}/change/"


def test_a_billing_weight_set_in_the_console_is_recorded(client, manny, partition):
    client.force_login(manny)
    response = client.post(
        url_of(partition), {"billing_weight": "2.5", "cpu_hour_rate": "0.01", "reason": " A100s "}
    )
    assert response.status_code == 302
    event = only(AuditEvent.Action.PARTITION_BILLING_WEIGHT)
    assert (event.actor, event.on_behalf_of, event.scope) == (manny, None, "")
    assert (event.target_type, event.target_id) == ("clusters.partition", str(partition.pk))
    assert event.target_repr == "portal-dev/gpu"
    assert event.detail == {"was": "1.000", "now": "2.500", "reason": "A100s"}


def test_an_unchanged_or_refused_weight_is_not_recorded(client, manny, partition):
    client.force_login(manny)
    assert (
        client.post(
            url_of(partition), {"billing_weight": "1", "cpu_hour_rate": "0.01", "reason": ""}
        ).status_code
        == 302
    )
    response = client.post(
        url_of(partition), {"billing_weight": "3", "cpu_hour_rate": "0.01", "reason": ""}
    )
    assert response.status_code == 200  # a new weight needs a reason
    assert not events(AuditEvent.Action.PARTITION_BILLING_WEIGHT)


def test_a_cpu_hour_rate_set_in_the_console_is_recorded(client, manny, partition):
    client.force_login(manny)
    data = {"billing_weight": "1", "cpu_hour_rate": "0.05", "reason": "big CPUs"}
    assert client.post(url_of(partition), data).status_code == 302
    event = only(AuditEvent.Action.PARTITION_CPU_HOUR_RATE)
    assert (event.actor, event.target_repr) == (manny, "portal-dev/gpu")
    assert event.detail == {"was": "0.0100", "now": "0.0500", "reason": "big CPUs"}
    assert not events(AuditEvent.Action.PARTITION_BILLING_WEIGHT)
