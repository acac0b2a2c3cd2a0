"""Accounting keeps one record per run of a job (a requeue runs it again under the same
id, submitted anew), and each record the reference of its charge in the ledger. The
records charged before keep the reference they were charged under, ``<cluster>:<id>``."""

from django.db import migrations, models

_CHARGED_BEFORE = """
UPDATE jobs_accountingrecord AS record
SET charge_reference = cluster.name || ':' || record.slurm_job_id
FROM clusters_cluster AS cluster
WHERE cluster.id = record.cluster_id
  AND record.charged_gpu_seconds IS NOT NULL
  AND EXISTS (SELECT 1 FROM accounts_ledgerentry AS entry
              WHERE entry.kind = 'charge'
                AND entry.reference = cluster.name || ':' || record.slurm_job_id)
"""


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0019_cap_reached"),
        ("clusters", "0010_refused_records"),
        ("jobs", "0009_cluster_sync_accounting_synced_at"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="accountingrecord",
            name="accounting_record_unique",
        ),
        migrations.AddField(
            model_name="accountingrecord",
            name="charge_reference",
            field=models.CharField(blank=True, max_length=100),
        ),
        migrations.RunSQL(_CHARGED_BEFORE, migrations.RunSQL.noop),
        migrations.AddField(
            model_name="job",
            name="requeue",
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.AddField(
            model_name="job",
            name="hold_raises",
            field=models.PositiveSmallIntegerField(db_default=0, default=0),
        ),
        migrations.AlterField(
            model_name="accountingrecord",
            name="array_task",
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AlterField(
            model_name="accountingrecord",
            name="partition",
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AddConstraint(
            model_name="accountingrecord",
            constraint=models.UniqueConstraint(
                fields=("cluster", "slurm_job_id", "submitted_at"), name="accounting_run_unique"
            ),
        ),
    ]
