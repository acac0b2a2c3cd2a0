"""Every write to clusters and partitions."""

import datetime as dt
import logging
import time
from decimal import Decimal
from typing import cast

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import connection, models, transaction
from django.utils import timezone

from audit.models import AuditEvent
from audit.services import audit_record
from clusters.models import Cluster, ClusterProbe, ClusterStatus, Partition, RefusedRecord
from clusters.slurm import SlurmError, client_for
from clusters.slurm.types import NodeInfo, QueueEntry, Refused
from clusters.status import status_snapshot

logger = logging.getLogger(__name__)


def cluster_register(
    *,
    name: str,
    backend: str = Cluster.Backend.CLI,
    command_prefix: str = "",
    run_as_prefix: str = "",
) -> Cluster:
    """Register a cluster by its Slurm ClusterName, its client tools reached through the
    given prefixes (see ``Cluster``); an existing one is returned unchanged.

    Raises ValidationError, with the fields' own messages, for prefixes that cannot work.
    """
    fields = {"backend": backend, "command_prefix": command_prefix, "run_as_prefix": run_as_prefix}
    Cluster(name=name, **fields).full_clean(validate_unique=False)
    cluster, _ = Cluster.objects.get_or_create(name=name, defaults=fields)
    return cluster


def partitions_sync(*, cluster: Cluster) -> list[Partition]:
    """Make the cluster's partitions match what Slurm reports.

    Limits and GPU counts come from Slurm; the billing weight stays the
    portal's. A partition Slurm no longer lists is kept (jobs refer to it)
    but marked down.
    """
    reported = client_for(cluster).list_partitions()  # Slurm first, outside the transaction
    now = timezone.now()
    with transaction.atomic():
        synced = []
        for info in reported:
            partition, _ = Partition.objects.update_or_create(
                cluster=cluster,
                name=info.name,
                defaults={
                    "is_default": info.is_default,
                    "is_up": info.is_up,
                    "max_time_minutes": info.max_time_minutes,
                    "nodes": info.nodes,
                    "gpus_per_node": info.gpus_per_node,
                    "gpu_type": info.gpu_type,
                    "total_gpus": info.total_gpus,
                    "synced_at": now,
                },
            )
            synced.append(partition)
        cluster.partitions.exclude(name__in=[info.name for info in reported]).update(
            is_up=False, synced_at=now
        )
    return synced


def partition_set_billing_weight(
    *, partition: Partition, weight: Decimal, actor: AbstractBaseUser, reason: str
) -> Partition:
    """Set the GPU-hours charged per GPU per hour on the partition; a reason is required.

    It prices portal jobs created from now on (a job keeps the weight it was
    created with); work from outside the portal is charged at the weight in
    force when its accounting is ingested.
    """
    if not reason.strip():
        raise ValueError("Say why the billing weight changes: it changes what jobs cost.")
    return _partition_set_price(
        partition=partition,
        field_name="billing_weight",
        value=weight,
        places=Decimal("0.001"),
        action=AuditEvent.Action.PARTITION_BILLING_WEIGHT,
        actor=actor,
        reason=reason,
    )


def partition_set_cpu_hour_rate(
    *, partition: Partition, rate: Decimal, actor: AbstractBaseUser, reason: str
) -> Partition:
    """Set the GPU-hours charged per CPU per hour on the partition; a reason is required.

    Like the billing weight it prices jobs created from now on and outside work
    ingested from now on; the reconciler's next run turns it into Slurm's CPU limit.
    """
    if not reason.strip():
        raise ValueError("Say why the CPU-hour rate changes: it changes what jobs cost.")
    return _partition_set_price(
        partition=partition,
        field_name="cpu_hour_rate",
        value=rate,
        places=Decimal("0.0001"),
        action=AuditEvent.Action.PARTITION_CPU_HOUR_RATE,
        actor=actor,
        reason=reason,
    )


def _partition_set_price(
    *,
    partition: Partition,
    field_name: str,
    value: Decimal,
    places: Decimal,
    action: str,
    actor: AbstractBaseUser,
    reason: str,
) -> Partition:
    with transaction.atomic():
        locked = (
            Partition.objects.select_for_update(of=("self",))
            .select_related("cluster")
            .get(pk=partition.pk)
        )
        was = getattr(locked, field_name)
        field = cast(models.DecimalField, Partition._meta.get_field(field_name))
        # Validated to the field's places first, so the quantize is exact.
        now = field.clean(value, locked).quantize(places)
        setattr(locked, field_name, now)
        if now != was:
            locked.save(update_fields=[field_name])
            audit_record(
                actor=actor,
                action=action,
                target=locked,
                detail={"was": was, "now": now, "reason": reason.strip()},
            )
    if now != was:
        logger.info(
            "partition %s: %s %s -> %s by %s: %s",
            locked,
            field.verbose_name,
            was,
            now,
            actor.get_username(),
            reason.strip(),
        )
    return locked


def cluster_probe(*, cluster: Cluster) -> ClusterProbe:
    """Ask the cluster's controller whether it answers (bounded by
    ``PORTAL_SLURM_HEALTH_TIMEOUT_S``) and keep the answer for pages and /healthz."""
    started = time.monotonic()
    try:
        client_for(cluster, timeout_s=settings.SLURM_HEALTH_TIMEOUT_S).ping()
    except SlurmError as error:
        ok, message = False, str(error)[:500] or type(error).__name__
    else:
        ok, message = True, ""
    probe, _ = ClusterProbe.objects.update_or_create(
        cluster=cluster,
        defaults={
            "ok": ok,
            "error": message,
            "latency_ms": round((time.monotonic() - started) * 1000, 1),
            "probed_at": timezone.now(),
        },
    )
    return probe


def cluster_status_record(
    *, cluster: Cluster, nodes: list[NodeInfo], queue: list[QueueEntry]
) -> ClusterStatus:
    """Store the cluster's status from one node and one queue listing (the queue sync's
    own), in place of the last one."""
    now = timezone.now()
    previous = ClusterStatus.objects.filter(cluster=cluster).values_list("snapshot", flat=True)
    snapshot = status_snapshot(
        nodes=nodes,
        queue=queue,
        now=now,
        pending_bound=dt.timedelta(minutes=settings.STUCK_GPU_PENDING_MINUTES),
        previous=previous.first(),
    )
    status, _ = ClusterStatus.objects.update_or_create(
        cluster=cluster,
        defaults={"taken_at": now, "snapshot": snapshot, "error": "", "error_at": None},
    )
    return status


def cluster_status_failed(*, cluster: Cluster, error: str) -> None:
    """Say on the cluster's status that its last poll could not read it; the snapshot
    before stays (it shows its own time)."""
    ClusterStatus.objects.filter(cluster=cluster).update(error=error[:500], error_at=timezone.now())


def refused_records_report(
    *, cluster: Cluster, listing: RefusedRecord.Listing, refused: list[Refused]
) -> None:
    """Keep the records a listing of the cluster refused (``RefusedRecord``): a new one
    gets a row, one seen before is counted again. Logged as warnings too. Nothing when
    nothing was refused (every queue sync calls this)."""
    if not refused:
        return
    now = timezone.now()
    for record in refused:
        logger.warning(
            "%s %s: refused Slurm job %s: %s", cluster.name, listing, record.job_id, record.problem
        )
    rows = {record.fingerprint: record for record in refused}
    with connection.cursor() as cursor:
        cursor.executemany(
            _REFUSED_UPSERT.format(table=RefusedRecord._meta.db_table),  # the table name is ours
            [
                {
                    "cluster": cluster.pk,
                    "listing": str(listing),
                    "job_id": record.job_id,
                    "problem": record.problem[:300],
                    # PostgreSQL's text holds no NUL, which Slurm never prints anyway.
                    "text": record.text.replace("\0", "\ufffd"),
                    "fingerprint": fingerprint,
                    "now": now,
                }
                for fingerprint, record in sorted(rows.items())
            ],
        )


_REFUSED_UPSERT = """
INSERT INTO {table} (cluster_id, listing, slurm_job_id, problem, text, fingerprint,
                     first_seen_at, last_seen_at, times_seen)
VALUES (%(cluster)s, %(listing)s, %(job_id)s, %(problem)s, %(text)s, %(fingerprint)s,
        %(now)s, %(now)s, 1)
ON CONFLICT (cluster_id, listing, fingerprint)
DO UPDATE SET last_seen_at = EXCLUDED.last_seen_at, times_seen = {table}.times_seen + 1
"""
