from django.db import migrations, models

import clusters.models


class Migration(migrations.Migration):
    dependencies = [
        ("clusters", "0006_cpu_hour_rate"),
    ]

    operations = [
        migrations.AddField(
            model_name="cluster",
            name="command_prefix",
            field=models.CharField(
                blank=True,
                help_text="Put before the operator's tools (sacctmgr, squeue, sacct, sinfo, scontrol), which the worker runs as itself, e.g. /usr/local/bin/cluster-b; split like a shell line, run without a shell. Empty: the worker's own tools (PORTAL_SLURM_BIN_DIR or PATH). The tools must run with TZ=UTC.",
                max_length=255,
                validators=[clusters.models.validate_command_prefix],
            ),
        ),
        migrations.AddField(
            model_name="cluster",
            name="run_as_prefix",
            field=models.CharField(
                blank=True,
                help_text="Put before a job owner's tools (sbatch, scancel, scontrol hold/release), {user} standing for their login, e.g. sudo -n -u {user}. Empty: PORTAL_SLURM_RUN_AS_PREFIX. Required with a command prefix.",
                max_length=255,
                validators=[clusters.models.validate_run_as_prefix],
            ),
        ),
        migrations.AddConstraint(
            model_name="cluster",
            constraint=models.CheckConstraint(
                condition=models.Q(("command_prefix", ""), models.Q(("run_as_prefix", ""), _negated=True), _connector="OR"),
                name="cluster_command_prefix_needs_run_as_prefix",
                violation_error_message="A cluster reached through a command prefix needs its own run-as prefix too: the global one would submit its jobs with the worker's own sbatch, to another cluster.",
            ),
        ),
    ]
