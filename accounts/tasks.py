import logging

from celery import shared_task

from accounts.adoption import account_listing_refresh
from accounts.caps import caps_reached_announce
from accounts.directory import DirectoryUnavailable
from accounts.directory_sync import directory_sync
from accounts.ledger import allocations_expire_due
from accounts.notifications import notifications_send
from accounts.posix import posix_login_survey
from accounts.reconcile import reconcile
from accounts.webhooks import webhook_deliver, webhook_deliveries_due
from clusters.locks import one_run_per_cluster
from clusters.selectors import clusters_enabled
from clusters.workers import reply

logger = logging.getLogger(__name__)


@shared_task
def reconcile_task() -> None:
    for cluster in clusters_enabled():
        # Beat's run and a console's "reconcile now" may reach workers on two hosts,
        # whose association lock files (clusters/locks.py) do not see each other.
        with one_run_per_cluster("reconcile", cluster.id) as acquired:
            if not acquired:
                logger.info("reconcile %s: another run is under way", cluster.name)
                continue
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
    reached = caps_reached_announce()
    if reached:
        logger.info("announced %d member(s) reaching their cap", reached)


@shared_task
def posix_login_survey_task(*, posix_username: str, reply_to: str) -> None:
    """A sign-in's question: does this login exist, and is it a person's, where each
    cluster's jobs are submitted (asked here, in a worker, which sees those places)."""
    reply(reply_to, posix_login_survey(posix_username))


@shared_task
def directory_sync_task() -> None:
    try:
        report = directory_sync()
    except DirectoryUnavailable as error:
        logger.warning("directory sync skipped: %s", error)
        return
    for line in report.switched_off + report.switched_on + report.memberships:
        logger.info("directory sync: %s", line)


@shared_task(time_limit=120, soft_time_limit=100)
def webhook_deliver_task(delivery_id: int) -> None:
    webhook_deliver(delivery_id=delivery_id)


@shared_task(time_limit=240, soft_time_limit=200)
def webhook_deliveries_sweep_task() -> None:
    """Send the deliveries that are due: retries, and new ones whose task was lost."""
    for delivery_id in webhook_deliveries_due():
        webhook_deliver_task.delay(delivery_id)
