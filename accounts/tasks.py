import logging

from celery import shared_task

from accounts.ledger import allocations_expire_due
from accounts.notifications import notifications_send
from accounts.reconcile import reconcile
from clusters.selectors import clusters_enabled

logger = logging.getLogger(__name__)


@shared_task
def reconcile_task() -> None:
    for cluster in clusters_enabled():
        report = reconcile(cluster=cluster)
        for action in report.actions:
            logger.info("reconcile %s: %s", cluster.name, action)
        for warning in report.warnings:
            logger.warning("reconcile %s: %s", cluster.name, warning)
        for error in report.errors:
            logger.warning("reconcile %s failed: %s", cluster.name, error)


@shared_task
def allocations_expire_task() -> None:
    for allocation in allocations_expire_due():
        logger.info("expired %s", allocation)


@shared_task
def notifications_send_task() -> None:
    sent = notifications_send()
    if sent:
        logger.info("sent %d notification mail(s)", sent)
