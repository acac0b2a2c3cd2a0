import logging

from celery import shared_task

from accounts.adoption import account_listing_refresh
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
def account_listing_task(cluster_id: int | None = None) -> None:
    """List what the enabled clusters (or the one given) already have in Slurm, for the
    console's Slurm import page."""
    clusters = clusters_enabled()
    if cluster_id is not None:
        clusters = clusters.filter(pk=cluster_id)
    for cluster in clusters:
        listing = account_listing_refresh(cluster=cluster)
        if listing.error:
            logger.warning("listing the accounts of %s failed: %s", cluster.name, listing.error)


@shared_task
def allocations_expire_task() -> None:
    for allocation in allocations_expire_due():
        logger.info("expired %s", allocation)


@shared_task
def notifications_send_task() -> None:
    sent = notifications_send()
    if sent:
        logger.info("sent %d notification mail(s)", sent)
