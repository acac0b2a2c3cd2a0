"""Jobs, their templates and events, and the accounting records Slurm reports."""

import uuid
from decimal import Decimal

from django.db import models
from django.utils.translation import gettext_lazy as _

from accounts.models import Project, User
from clusters.models import Cluster, Partition
from jobs.states import TERMINAL_STATES, JobState
from jobs.tokens import comment_for


class JobTemplate(models.Model):
    """A named, reusable job form: defaults for the request fields and a script body."""

    class Scope(models.TextChoices):
        USER = "user", _("Mine")
        PROJECT = "project", _("Shared with a project")
        GLOBAL = "global", _("Everyone")

    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    scope = models.CharField(max_length=8, choices=Scope.choices, default=Scope.USER)
    owner = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.CASCADE, related_name="job_templates"
    )
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.CASCADE, related_name="job_templates"
    )
    # Defaults of the job request fields (partition, gpus_per_node, time_limit_minutes…);
    # a job form validates them like any request, so a stale default cannot slip through.
    defaults = models.JSONField(default=dict, blank=True)
    script = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    models.Q(scope="user", owner__isnull=False, project__isnull=True)
                    | models.Q(scope="project", project__isnull=False)
                    | models.Q(scope="global", project__isnull=True)
                ),
                name="job_template_scope_matches_owner",
            ),
        ]

    def __str__(self) -> str:
        return self.name


UNFINISHED_STATES = sorted(str(state) for state in frozenset(JobState) - TERMINAL_STATES)


class Job(models.Model):
    """One portal submission, from the typed request to Slurm's outcome."""

    State = JobState

    owner = models.ForeignKey(User, on_delete=models.PROTECT, related_name="jobs")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="jobs")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="jobs")
    partition = models.ForeignKey(Partition, on_delete=models.PROTECT, related_name="jobs")
    template = models.ForeignKey(
        JobTemplate, null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs"
    )

    # The typed request, as validated.
    name = models.CharField(max_length=64)
    nodes = models.PositiveIntegerField(default=1)
    gpus_per_node = models.PositiveIntegerField(default=0)
    cpus_per_gpu = models.PositiveIntegerField(null=True, blank=True)
    mem_per_gpu_gb = models.PositiveIntegerField(null=True, blank=True)
    time_limit_minutes = models.PositiveIntegerField()
    working_directory = models.CharField(max_length=1024)
    output_path = models.CharField(max_length=1024)
    error_path = models.CharField(max_length=1024)
    environment = models.JSONField(default=dict, blank=True)
    array = models.CharField(max_length=64, blank=True)
    array_tasks = models.PositiveIntegerField(default=1)
    depends_on = models.ManyToManyField("self", symmetrical=False, blank=True)
    script = models.TextField()
    rendered_script = models.TextField()
    # Whether Slurm may run the job again after a node failure or a preemption (--requeue);
    # every run is charged either way. Off unless the template asks for it.
    requeue = models.BooleanField(default=False, db_default=False)

    # Submission: the token travels in Slurm's comment and finds the job again.
    submit_token = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    idempotency_key = models.CharField(max_length=200, blank=True)
    submit_attempts = models.PositiveIntegerField(default=0)
    claimed_until = models.DateTimeField(null=True, blank=True)
    submit_error = models.TextField(blank=True)
    # Asked before the job reached Slurm: the submission stops (or scancels at once).
    cancel_requested_at = models.DateTimeField(null=True, blank=True)

    # What Slurm says.
    slurm_job_id = models.BigIntegerField(null=True, blank=True)
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.NEW)
    slurm_state = models.CharField(max_length=32, blank=True)
    reason = models.CharField(max_length=200, blank=True)
    # While it pends: when Slurm expects to start it (the scheduler's forecast, often
    # none), and its place among the pending jobs of its partition, everyone's, by
    # Slurm's priority (1: next). Both refreshed by the queue sync.
    expected_start_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text=_("While it pends: when Slurm expects to start it (its forecast; often none)."),
    )
    queue_place = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=_(
            "While it pends: its place among the pending jobs of its partition by Slurm's "
            "priority (1: next)."
        ),
    )
    exit_code = models.IntegerField(null=True, blank=True)

    # GPU-seconds: held at creation, used as charged from accounting.
    billing_weight = models.DecimalField(max_digits=6, decimal_places=3)
    # The partition's rate when the job was made; 0 for jobs made before CPUs were charged.
    # (A database default too, so rows written by SQL, as the benches do, need not name it.)
    cpu_hour_rate = models.DecimalField(
        max_digits=7, decimal_places=4, default=Decimal(0), db_default=Decimal(0)
    )
    requested_gpu_seconds = models.BigIntegerField()
    used_gpu_seconds = models.BigIntegerField(null=True, blank=True)
    # How many times the hold was raised after submission (the job grew in Slurm: see
    # ``hold_references``).
    hold_raises = models.PositiveSmallIntegerField(default=0, db_default=0)

    created_at = models.DateTimeField(auto_now_add=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "slurm_job_id"],
                condition=models.Q(slurm_job_id__isnull=False),
                name="job_slurm_id_unique_per_cluster",
            ),
            models.UniqueConstraint(
                fields=["owner", "idempotency_key"],
                condition=~models.Q(idempotency_key=""),
                name="job_idempotency_key_unique_per_owner",
            ),
            models.CheckConstraint(
                condition=models.Q(requested_gpu_seconds__gte=0), name="job_requested_not_negative"
            ),
        ]
        indexes = [
            models.Index(fields=["owner", "-created_at"], name="job_owner_recent"),
            models.Index(fields=["project", "-created_at"], name="job_project_recent"),
            # The queue sync and the sweeper read only unfinished jobs; with a
            # million finished ones this partial index keeps them cheap.
            models.Index(
                fields=["cluster", "state"],
                condition=models.Q(state__in=UNFINISHED_STATES),
                name="job_unfinished",
            ),
            # How many of a researcher's jobs pend (or are not finished), which the list
            # counts for its pages: read from this index alone, not from the rows of all
            # their jobs (100,000 finished ones, in bench/status.py).
            models.Index(
                fields=["owner", "state"],
                condition=models.Q(state__in=UNFINISHED_STATES),
                name="job_owner_unfinished",
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.name}"

    @property
    def hold_reference(self) -> str:
        return f"job:{self.submit_token}"

    @property
    def hold_references(self) -> list[str]:
        """The job's hold and each raise of it, all released when the job ends."""
        base = self.hold_reference
        return [base, *(f"{base}+{number}" for number in range(1, self.hold_raises + 1))]

    @property
    def comment(self) -> str:
        return comment_for(self.submit_token)

    @property
    def is_finished(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def requested_gpu_hours(self) -> float:
        return self.requested_gpu_seconds / 3600

    @property
    def used_gpu_hours(self) -> float | None:
        return None if self.used_gpu_seconds is None else self.used_gpu_seconds / 3600

    @property
    def charged_gpu_hours(self) -> float | None:
        """What the job was charged: its used hours once accounting has them, nothing
        for one that ended without reaching Slurm (its hold went back), and None while
        a charge may still come (the job holds its requested hours until then)."""
        if self.used_gpu_seconds is not None:
            return self.used_gpu_seconds / 3600
        if self.is_finished and self.slurm_job_id is None:
            return 0.0
        return None


class JobEvent(models.Model):
    """A change of a job's state, with what Slurm said; the job page's timeline."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField()
    state = models.CharField(max_length=16, choices=JobState.choices)
    detail = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["job", "at"], name="job_event_job_at")]

    def __str__(self) -> str:
        return f"{self.job_id} {self.state} at {self.at:%Y-%m-%d %H:%M:%S}"


class AccountingRecord(models.Model):
    """One run of a Slurm job (or array task), portal or not, as accounting reports it: a
    requeued job runs again under the same id with a new submit time, and each run is a
    record of its own, charged on its own (``charge_reference``)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="accounting")
    slurm_job_id = models.BigIntegerField()
    array_job_id = models.BigIntegerField(null=True, blank=True)
    # As Slurm wrote them, cut to these lengths (``jobs.accounting._upsert``): an array's
    # pending tasks "[2-9%2]" and a pending job's partitions "gpu,debug" are as long as
    # their owner made them.
    array_task = models.CharField(max_length=200, blank=True)
    job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="accounting"
    )
    name = models.CharField(max_length=200, blank=True)
    user = models.CharField(max_length=64)
    account = models.CharField(max_length=64)
    partition = models.CharField(max_length=200, blank=True)
    state = models.CharField(max_length=32)
    exit_code = models.IntegerField(null=True, blank=True)
    signal = models.IntegerField(null=True, blank=True)
    allocated_gpus = models.PositiveIntegerField(default=0)
    allocated_cpus = models.PositiveIntegerField(default=0, db_default=0)
    elapsed_s = models.BigIntegerField(default=0)
    submitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    comment = models.CharField(max_length=200, blank=True)
    # What it used, for the job's efficiency (clusters.slurm.types.StepUsage): NULL is
    # "not recorded by the cluster", never 0.
    time_limit_minutes = models.PositiveIntegerField(null=True, blank=True)
    mem_allocated_bytes = models.BigIntegerField(null=True, blank=True)
    cpu_time_s = models.FloatField(null=True, blank=True)
    mem_peak_bytes = models.BigIntegerField(null=True, blank=True)
    gpu_util_percent = models.FloatField(null=True, blank=True)
    gpu_mem_peak_bytes = models.BigIntegerField(null=True, blank=True)
    # Set once, when the record's charge is in the ledger (possibly of 0), with the
    # ledger entry's reference ("" when nothing could be charged: see the note).
    charged_gpu_seconds = models.BigIntegerField(null=True, blank=True)
    charge_reference = models.CharField(max_length=100, blank=True)
    charge_note = models.CharField(max_length=300, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-slurm_job_id"]
        constraints = [
            # Every run has its submit time (accounting refuses one without:
            # clusters.slurm.types.accounting_checked).
            models.UniqueConstraint(
                fields=["cluster", "slurm_job_id", "submitted_at"], name="accounting_run_unique"
            ),
        ]
        indexes = [
            models.Index(
                fields=["cluster"],
                condition=models.Q(charged_gpu_seconds__isnull=True),
                name="accounting_uncharged",
            ),
            # A project page sums its account's unsuccessful jobs over an allocation.
            models.Index(fields=["cluster", "account", "ended_at"], name="accounting_account_end"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id}:{self.slurm_job_id}"


class ClusterSync(models.Model):
    """How far the portal has read a cluster's queue and accounting."""

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="sync")
    queue_synced_at = models.DateTimeField(null=True, blank=True)
    accounting_until = models.DateTimeField(null=True, blank=True)
    # When an ingest last read accounting and applied it (the mark above moves only
    # when accounting reports something new): the accounting lag of the metrics.
    accounting_synced_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"sync of {self.cluster_id}"


class JobEndMail(models.Model):
    """A job's end, to be mailed to its owner (jobs.job_mail): one row per job, made by
    the accounting ingest when it finishes the job, claimed before the digest that
    lists it goes out and marked sent after."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="end_mail")
    owner = models.ForeignKey(User, on_delete=models.CASCADE, related_name="job_end_mails")
    created_at = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    # The address it went to; empty when sent_at is set: not mailed (the owner chose
    # not to hear of it by then, or has no address).
    recipient = models.CharField(max_length=254, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["owner", "created_at"],
                condition=models.Q(sent_at__isnull=True),
                name="job_end_mail_unsent",
            ),
        ]

    def __str__(self) -> str:
        return f"end of job {self.job_id} for {self.owner_id}"
