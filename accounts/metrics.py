"""The accounts' metrics: counted where log-ins, mails and webhook deliveries happen, and
the ledger's totals read from the database when Prometheus scrapes (portal/metrics.py).

Labels stay few: a source, a kind of mail, an event; never a person or a job. The ledger
is reported per active allocation (a project has one per cluster and period).
"""

from typing import Any

from django.contrib.auth.signals import user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest
from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily

from accounts.models import Allocation, available_gpu_seconds
from accounts.selectors import in_force

LOGIN_FAILURES = Counter(
    "portal_login_failures",
    "Failed log-ins (a wrong password or user name, a sign-in the provider did not "
    "confirm), by the page they were tried on: web, admin, sso or other.",
    ["source"],
)
MAILS = Counter(
    "portal_notification_mails",
    "Mails the portal sent (outcome sent) or could not hand to the mail server (failed), "
    "by kind: allocation (usage and expiry notices), job_end, webhook_disabled.",
    ["kind", "outcome"],
)
WEBHOOK_DELIVERIES = Counter(
    "portal_webhook_deliveries",
    "Tries of webhook deliveries by event and outcome: sent (a 2xx answer) or failed "
    "(another answer, none, or a refused address; it may be tried again).",
    ["event", "outcome"],
)

# The log-in pages by their URL names (portal/urls.py).
_LOGIN_SOURCES = {"login": "web", "admin_login": "admin", "oidc_callback": "sso"}


@receiver(user_login_failed)
def _count_login_failure(
    sender: Any, credentials: dict, request: HttpRequest | None = None, **kwargs: Any
) -> None:
    match = getattr(request, "resolver_match", None)
    LOGIN_FAILURES.labels(source=_LOGIN_SOURCES.get(match.url_name if match else "", "other")).inc()


def mail_counted(kind: str, *, sent: bool) -> None:
    MAILS.labels(kind=kind, outcome="sent" if sent else "failed").inc()


def webhook_try_counted(event: str, *, sent: bool) -> None:
    WEBHOOK_DELIVERIES.labels(event=event, outcome="sent" if sent else "failed").inc()


def ledger_metric_families() -> list[GaugeMetricFamily]:
    labels = ["project", "cluster", "allocation"]
    totals = {
        name: GaugeMetricFamily(f"portal_allocation_{name}_gpu_hours", text, labels=labels)
        for name, text in (
            ("granted", "GPU-hours granted to an allocation in force (grants and adjustments)."),
            ("used", "GPU-hours charged to an allocation in force."),
            ("held", "GPU-hours an allocation in force holds for jobs not yet charged."),
            ("available", "GPU-hours of an allocation in force that new jobs can still use."),
        )
    }
    # In force only: a grant whose period starts later is available to nobody yet.
    active = (
        Allocation.objects.filter(in_force())
        .select_related("project", "cluster")
        .only(
            "project__slug",
            "cluster__name",
            "granted_gpu_seconds",
            "used_gpu_seconds",
            "held_gpu_seconds",
            "expired_gpu_seconds",
        )
        .order_by("pk")
    )
    for allocation in active:
        values = [allocation.project.slug, allocation.cluster.name, str(allocation.pk)]
        totals["granted"].add_metric(values, allocation.granted_gpu_seconds / 3600)
        totals["used"].add_metric(values, allocation.used_gpu_seconds / 3600)
        totals["held"].add_metric(values, allocation.held_gpu_seconds / 3600)
        totals["available"].add_metric(values, available_gpu_seconds(allocation) / 3600)
    return list(totals.values())
