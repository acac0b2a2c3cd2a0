from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from clusters.prefixes import PrefixInvalid, command_prefix_argv, run_as_prefix_template

# An H200 GPU-hour is worth about a hundred core-hours (cloud list prices, and a node
# of 8 GPUs has 100-200 cores), so one CPU for one hour costs 0.01 GPU-hours: a GPU
# job's few CPUs barely change its price, a week on all 16 CPUs of the dev node costs
# 27 GPU-hours. Never 0, so no job is free and Slurm's CPU limit has a finite size.
DEFAULT_CPU_HOUR_RATE = Decimal("0.0100")
MIN_CPU_HOUR_RATE = Decimal("0.0001")

slurm_name_validator = RegexValidator(
    r"^[a-z][a-z0-9_-]{0,39}$",
    _("Use lower-case letters, digits, '-' and '_', starting with a letter (at most 40)."),
)


def validate_command_prefix(value: str) -> None:
    try:
        command_prefix_argv(value)
    except PrefixInvalid as error:
        raise ValidationError(str(error)) from None


def validate_run_as_prefix(value: str) -> None:
    try:
        run_as_prefix_template(value)
    except PrefixInvalid as error:
        raise ValidationError(str(error)) from None


class Cluster(models.Model):
    class Backend(models.TextChoices):
        REST = "rest", _("slurmrestd (REST API with JWT)")
        CLI = "cli", _("Slurm command-line tools")

    name = models.CharField(
        max_length=40,
        unique=True,
        validators=[slurm_name_validator],
        help_text=_("Slurm's ClusterName."),
    )
    backend = models.CharField(max_length=16, choices=Backend.choices, default=Backend.CLI)
    rest_url = models.URLField(
        blank=True, help_text=_("slurmrestd's base URL, e.g. http://127.0.0.1:6820 (rest backend).")
    )
    rest_api_version = models.CharField(
        max_length=16,
        blank=True,
        help_text=_("e.g. v0.0.38; empty means the newest the cluster offers."),
    )
    jwt_key_file = models.CharField(
        max_length=255,
        blank=True,
        help_text=_("Path of the cluster's HS256 JWT key; the portal mints short-lived tokens."),
    )
    admin_user = models.CharField(
        max_length=32,
        default="slurm",
        help_text=_("The Slurm administrator the portal acts as for accounts and limits."),
    )
    # How the worker reaches the cluster's own client tools (cli backend). The prefix
    # replaces PORTAL_SLURM_BIN_DIR, which names a folder on the worker: a cluster with a
    # command prefix runs each tool by its bare name, found by whatever the prefix runs
    # (a chroot's PATH, a login node's, a wrapper script's).
    command_prefix = models.CharField(
        max_length=255,
        blank=True,
        validators=[validate_command_prefix],
        help_text=_(
            "Put before the operator's tools (sacctmgr, squeue, sacct, sinfo, scontrol), "
            "which the worker runs as itself, e.g. /usr/local/bin/cluster-b; split like a "
            "shell line, run without a shell. Empty: the worker's own tools "
            "(PORTAL_SLURM_BIN_DIR or PATH). The tools must run with TZ=UTC."
        ),
    )
    run_as_prefix = models.CharField(
        max_length=255,
        blank=True,
        validators=[validate_run_as_prefix],
        help_text=_(
            "Put before a job owner's tools (sbatch, scancel, scontrol hold/release), {user} "
            "standing for their login, e.g. sudo -n -u {user}. Empty: "
            "PORTAL_SLURM_RUN_AS_PREFIX. Required with a command prefix."
        ),
    )
    # Where the portal's accounts go in the cluster's account tree: a site that already
    # has one (a department, a "portal" branch with its own share) names it here. The
    # site makes it; the reconciler reports its absence rather than invent a branch of
    # the site's tree (its shares and limits are the site's to decide).
    parent_account = models.CharField(
        max_length=40,
        default="root",
        validators=[slurm_name_validator],
        help_text=_(
            "The Slurm account the portal creates its projects' accounts under, e.g. root or "
            "a branch the site made for the portal; it must exist on the cluster. Accounts "
            "already made stay where they are."
        ),
    )
    is_enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            # Otherwise the global run-as prefix would run the worker's own sbatch, and a
            # job meant for this cluster would go to the one the worker's tools reach.
            models.CheckConstraint(
                condition=models.Q(command_prefix="") | ~models.Q(run_as_prefix=""),
                name="cluster_command_prefix_needs_run_as_prefix",
                violation_error_message=_(
                    "A cluster reached through a command prefix needs its own run-as prefix "
                    "too: the global one would submit its jobs with the worker's own sbatch, "
                    "to another cluster."
                ),
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Partition(models.Model):
    """A Slurm partition as last synced from the cluster, plus portal billing."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="partitions")
    name = models.CharField(max_length=64, validators=[slurm_name_validator])
    is_default = models.BooleanField(default=False)
    is_up = models.BooleanField(default=True)
    max_time_minutes = models.PositiveIntegerField(
        null=True, blank=True, help_text=_("Empty means no limit.")
    )
    nodes = models.PositiveIntegerField(default=0)
    gpus_per_node = models.PositiveIntegerField(default=0)
    gpu_type = models.CharField(max_length=64, blank=True)
    total_gpus = models.PositiveIntegerField(default=0)
    billing_weight = models.DecimalField(
        max_digits=6,
        decimal_places=3,
        default=Decimal("1.000"),
        validators=[MinValueValidator(Decimal("0.001"))],
        help_text=_("GPU-hours charged per GPU per hour."),
    )
    # No job is free: CPUs are charged too, in GPU-hours, so a CPU-only job (or a GPU
    # job's CPUs) costs something and fits a balance like any other (issue 16).
    cpu_hour_rate = models.DecimalField(
        max_digits=7,
        decimal_places=4,
        default=DEFAULT_CPU_HOUR_RATE,
        validators=[MinValueValidator(MIN_CPU_HOUR_RATE)],
        help_text=_("GPU-hours charged per CPU per hour."),
    )
    synced_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "name"], name="partition_unique_per_cluster"
            ),
            models.CheckConstraint(
                condition=models.Q(billing_weight__gt=0), name="partition_billing_weight_positive"
            ),
            models.CheckConstraint(
                condition=models.Q(cpu_hour_rate__gt=0), name="partition_cpu_hour_rate_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name}"


class ClusterProbe(models.Model):
    """The last time a worker asked the cluster's controller whether it answers.

    Beat probes every cluster every few seconds; /healthz, the composer and the
    status pages read this row, so a page view never runs a Slurm command.
    """

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="probe")
    ok = models.BooleanField()
    error = models.CharField(max_length=500, blank=True)
    latency_ms = models.FloatField()
    probed_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.cluster.name}: {'up' if self.ok else 'down'} at {self.probed_at:%c}"


class ClusterStatus(models.Model):
    """The cluster as the queue sync last polled it: GPUs, nodes and the queue's depth
    (``clusters.status``). The status page, the API and ``sgp status`` read this row,
    so a page view never runs a Slurm command."""

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="status")
    taken_at = models.DateTimeField()
    snapshot = models.JSONField()
    # The last poll that failed to read the nodes (the snapshot is then the one before).
    error = models.CharField(max_length=500, blank=True)
    error_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.cluster.name} at {self.taken_at:%c}"


class RefusedRecord(models.Model):
    """A record of one of the cluster's listings that the portal did not take
    (``clusters.slurm.types.Refused``): unreadable, or contradicting another record of
    the same listing. One row per distinct record, seen again and again while Slurm
    keeps listing it; the invariants check, the metrics and the drift page report them."""

    class Listing(models.TextChoices):
        QUEUE = "queue", _("queue")
        ACCOUNTING = "accounting", _("accounting")

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="refused_records")
    listing = models.CharField(max_length=16, choices=Listing.choices)
    slurm_job_id = models.BigIntegerField(null=True, blank=True)
    problem = models.CharField(max_length=300)
    text = models.TextField(blank=True)
    # The same record seen again counts here, it makes no second row.
    fingerprint = models.CharField(max_length=64)
    first_seen_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    times_seen = models.PositiveIntegerField(default=1)

    class Meta:
        ordering = ["-last_seen_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "listing", "fingerprint"], name="refused_record_once"
            ),
        ]
        indexes = [models.Index(fields=["last_seen_at"], name="refused_record_seen")]

    def __str__(self) -> str:
        return f"{self.cluster.name} {self.listing} {self.slurm_job_id}: {self.problem}"
