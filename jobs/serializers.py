"""How the jobs API shows and reads jobs and templates: its serializers.

Serializers here check types only and build a JobRequest; every rule about what a job
may ask for is the services' (jobs.requests.job_prepare). A page of the job list is
shown from rows, not model objects (``job_list_items``), for speed.
"""

from typing import Any

from drf_spectacular.utils import OpenApiExample, extend_schema_field
from rest_framework import serializers

from accounts.api_support import related
from jobs.efficiency import job_efficiency
from jobs.internals import shared_serializer
from jobs.models import Job, JobEvent, JobTemplate
from jobs.pending_reasons import explain_job_wait
from jobs.requests import TEMPLATE_DEFAULT_FIELDS, JobRequest
from jobs.specs import MAX_DEPENDENCIES
from jobs.states import JobState

INT32 = 2**31 - 1
INT64 = 2**63 - 1


def _text(**kwargs: Any) -> serializers.CharField:
    # Not trimmed: a script's or a path's whitespace is the user's to keep.
    return serializers.CharField(
        required=False, allow_null=True, allow_blank=True, trim_whitespace=False, **kwargs
    )


def _whole(**kwargs: Any) -> serializers.IntegerField:
    return serializers.IntegerField(
        required=False, allow_null=True, min_value=-INT32, max_value=INT32, **kwargs
    )


JOB_REQUEST_EXAMPLE = OpenApiExample(
    "A one-GPU training run",
    request_only=True,
    value={
        "project": "ml-team",
        "partition": "debug",
        "name": "train",
        "gpus_per_node": 1,
        "time_limit_minutes": 30,
        "environment": {"EPOCHS": "3"},
        "script": "python train.py\n",
    },
)


class JobRequestSerializer(serializers.Serializer):
    """DESIGN's job request. A field left out (or null) takes the template's value,
    then the portal's default."""

    project = _text(help_text="The paying project's slug (one of yours).")
    cluster = _text(
        help_text="Optional when the portal has one cluster or only one has the partition named."
    )
    partition = _text(help_text="Default: the cluster's default partition.")
    name = _text(help_text="Letters, digits, '.', '_' and '-'; at most 64. Default: job.")
    nodes = _whole(help_text="Default 1.")
    gpus_per_node = _whole(help_text="Default 1.")
    cpus_per_gpu = _whole()
    mem_per_gpu_gb = _whole()
    time_limit_minutes = _whole(help_text="Default 60; at most the partition's limit.")
    working_directory = _text(help_text="Absolute, inside your allowed folders. Default: home.")
    output_path = _text(help_text="stdout file; Slurm's %j %A %a %x %u patterns allowed.")
    error_path = _text(help_text="stderr file; default: the output file.")
    environment = serializers.DictField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        required=False,
        allow_null=True,
        help_text="Variable names and values; the job sees only these (--export=NONE).",
    )
    array = _text(max_length=64, help_text="A Slurm array spec, e.g. 0-9%2.")
    requeue = serializers.BooleanField(
        required=False,
        allow_null=True,
        help_text="Whether Slurm may run the job again (after a node failure, or its "
        "owner's scontrol requeue); every run is charged. Default: the template's, else false.",
    )
    depends_on = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=INT64),
        required=False,
        allow_null=True,
        max_length=MAX_DEPENDENCIES,
        help_text="Ids of your portal jobs that must succeed first (afterok).",
    )
    script = _text(help_text="The script body; #SBATCH lines are refused (use the fields).")
    template = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=INT64,
        help_text="A template's id: its values are defaults for the fields left out.",
    )

    def canonical(self) -> dict[str, Any]:
        """The request as it means: null and left out are the same."""
        data = {k: v for k, v in self.validated_data.items() if v is not None}
        if "depends_on" in data:
            data["depends_on"] = sorted(set(data["depends_on"]))
        return data

    def job_request(self) -> JobRequest:
        data = self.canonical()
        if "depends_on" in data:
            data["depends_on"] = tuple(data["depends_on"])
        return JobRequest(**data)


class JobEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["at", "state", "detail"]
        read_only_fields = fields


class PendingReasonSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Slurm's reason (its name, or its text if unknown).")
    family = serializers.CharField(
        help_text="The kind of wait: queued, priority, resources, dependency, held, "
        "begin_time, partition, nodes, reservation, licenses, gpu_hours, limit, account, "
        "request, requeued, scheduler or unknown."
    )
    sentence = serializers.CharField(help_text="Why it waits, in the request's language.")
    advice = serializers.CharField(
        allow_blank=True, help_text="What you can do; empty when it is only a matter of time."
    )


def pending_reason_shown(state: str, reason: str, nodes: int, gpus_per_node: int) -> Any:
    """A job's ``pending_reason``: its explanation while it pends, else None."""
    explained = explain_job_wait(
        state=state, reason=reason, nodes=nodes, gpus_per_node=gpus_per_node
    )
    if explained is None:
        return None
    return {
        "code": explained.code,
        "family": explained.family,
        "sentence": explained.sentence,
        "advice": explained.advice,
    }


class JobSerializer(serializers.ModelSerializer):
    owner = related("username")
    project = related("slug")
    cluster = related("name")
    partition = related("name")
    template: serializers.PrimaryKeyRelatedField[JobTemplate] = serializers.PrimaryKeyRelatedField(
        read_only=True, allow_null=True
    )
    depends_on = serializers.ManyRelatedField(
        child_relation=serializers.PrimaryKeyRelatedField(read_only=True),
        read_only=True,
        help_text="Ids of the jobs this one waits for.",
    )
    environment = serializers.DictField(child=serializers.CharField(), read_only=True)
    billing_weight = serializers.DecimalField(
        max_digits=6, decimal_places=3, coerce_to_string=False, read_only=True
    )
    cpu_hour_rate = serializers.DecimalField(
        max_digits=7,
        decimal_places=4,
        coerce_to_string=False,
        read_only=True,
        help_text="GPU-hours charged per CPU per hour, as when the job was made.",
    )
    requested_gpu_hours = serializers.FloatField(
        read_only=True,
        help_text="Requested, and held from the balance until the job is charged: nodes x "
        "GPUs per node x time limit x array tasks x the partition's billing weight, plus "
        "its CPUs' hours x the CPU-hour rate.",
    )
    used_gpu_hours = serializers.FloatField(
        read_only=True, allow_null=True, help_text="Charged from accounting once the job ended."
    )
    pending_reason = serializers.SerializerMethodField(
        help_text="Why a pending job waits, in words (reason is Slurm's own); null otherwise."
    )
    requeue = serializers.BooleanField(
        read_only=True,
        help_text="Whether Slurm may run the job again (--requeue; else --no-requeue).",
    )

    @extend_schema_field(PendingReasonSerializer(allow_null=True))
    def get_pending_reason(self, job: Job) -> Any:
        return pending_reason_shown(job.state, job.reason, job.nodes, job.gpus_per_node)

    class Meta:
        model = Job
        fields = [
            "id",
            "state",
            "slurm_job_id",
            "slurm_state",
            "reason",
            "pending_reason",
            "expected_start_at",
            "queue_place",
            "exit_code",
            "submit_error",
            "requested_gpu_hours",
            "used_gpu_hours",
            "billing_weight",
            "cpu_hour_rate",
            "created_at",
            "submitted_at",
            "started_at",
            "ended_at",
            "owner",
            "project",
            "cluster",
            "partition",
            "template",
            "name",
            "nodes",
            "gpus_per_node",
            "cpus_per_gpu",
            "mem_per_gpu_gb",
            "time_limit_minutes",
            "working_directory",
            "output_path",
            "error_path",
            "environment",
            "array",
            "array_tasks",
            "requeue",
            "depends_on",
            "script",
            "rendered_script",
        ]
        read_only_fields = fields


class JobListItemSerializer(JobSerializer):
    """A job in a list: all of it but the two scripts (GET jobs/{id}/ has them)."""

    depends_on = serializers.ListField(  # type: ignore[assignment]
        source="depends_on_ids",
        child=serializers.IntegerField(),
        read_only=True,
        help_text="Ids of the jobs this one waits for.",
    )

    class Meta(JobSerializer.Meta):
        fields = [f for f in JobSerializer.Meta.fields if f not in ("script", "rendered_script")]
        read_only_fields = fields


# Where each field of a list item is in a row of jobs_listed(): a related object's name
# and the dependencies' ids are read in the same query; the rest are the job's columns.
_RELATED_IN_ROW = {
    "owner": "owner__username",
    "project": "project__slug",
    "cluster": "cluster__name",
    "partition": "partition__name",
    "template": "template",
}
_COMPUTED = {"requested_gpu_hours", "used_gpu_hours", "depends_on", "pending_reason"}
_LISTED_COLUMNS = [
    name
    for name in JobListItemSerializer.Meta.fields
    if name not in _RELATED_IN_ROW and name not in _COMPUTED
]
# What jobs.selectors.jobs_listed reads for a page (the dependencies' ids come with it).
LISTED_ROW = [
    *_LISTED_COLUMNS,
    *_RELATED_IN_ROW.values(),
    "requested_gpu_seconds",
    "used_gpu_seconds",
]


def job_list_items(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A page of jobs_listed() rows as JobListItemSerializer shows jobs (the schema's
    shape): each value through the serializer's own field, without building model
    objects or DRF's per-object walk, which together cost more than the rest of the
    request (bench/api.py). tests/api/test_jobs_list.py checks both give the same."""
    fields = JobListItemSerializer().fields
    items = []
    for row in rows:
        item: dict[str, Any] = {}
        for name, field in fields.items():
            if name in _RELATED_IN_ROW:
                item[name] = row[_RELATED_IN_ROW[name]]
                continue
            if name == "requested_gpu_hours":
                value = row["requested_gpu_seconds"] / 3600
            elif name == "used_gpu_hours":
                used = row["used_gpu_seconds"]
                value = None if used is None else used / 3600
            elif name == "depends_on":
                value = row["depends_on_ids"]
            elif name == "pending_reason":
                item[name] = pending_reason_shown(
                    row["state"], row["reason"], row["nodes"], row["gpus_per_node"]
                )
                continue
            else:
                value = row[name]
            item[name] = None if value is None else field.to_representation(value)
        items.append(item)
    return items


class EfficiencySerializer(serializers.Serializer):
    """jobs.efficiency.Efficiency: null figures are not recorded by the cluster."""

    tasks = serializers.IntegerField(help_text="Array tasks summed (1 for a plain job).")
    elapsed_s = serializers.IntegerField(help_text="The longest task's run.")
    time_limit_s = serializers.IntegerField(allow_null=True)
    time_percent = serializers.FloatField(allow_null=True)
    cpu_time_s = serializers.FloatField(allow_null=True, help_text="TotalCPU of all tasks.")
    cpu_allocated_s = serializers.IntegerField(help_text="Elapsed x CPUs, all tasks.")
    cpu_percent = serializers.FloatField(allow_null=True)
    mem_peak_bytes = serializers.IntegerField(allow_null=True)
    mem_allocated_bytes = serializers.IntegerField(allow_null=True)
    mem_percent = serializers.FloatField(allow_null=True)
    gpu_util_percent = serializers.FloatField(
        allow_null=True, help_text="Null where Slurm records none (no NVML), never 0."
    )
    gpu_mem_peak_bytes = serializers.IntegerField(allow_null=True)
    gpu_hours = serializers.FloatField(help_text="GPUs x elapsed, all tasks.")
    asked_far_more_time = serializers.BooleanField()
    asked_far_more_memory = serializers.BooleanField()


class JobDetailSerializer(JobSerializer):
    events = JobEventSerializer(many=True, read_only=True)
    efficiency = serializers.SerializerMethodField(
        help_text="How the job used what it asked for; null until it ended and "
        "accounting has it, and for a job that never ran."
    )

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "events", "efficiency"]
        read_only_fields = fields

    @extend_schema_field(EfficiencySerializer(allow_null=True))
    def get_efficiency(self, job: Job) -> dict[str, Any] | None:
        efficiency = job_efficiency(job)
        return None if efficiency is None else EfficiencySerializer(efficiency).data


def job_shown(job: Job) -> dict[str, Any]:
    """``JobDetailSerializer(job).data``, through the process's one such serializer."""
    return shared_serializer(JobDetailSerializer).to_representation(job)


class EstimateSerializer(serializers.Serializer):
    requested_gpu_hours = serializers.FloatField(
        help_text="The cost: gpu_part_gpu_hours + cpu_part_gpu_hours, rounded up to a second."
    )
    gpu_hours = serializers.FloatField(help_text="GPUs x time limit x array tasks.")
    billing_weight = serializers.DecimalField(
        source="price.billing_weight", max_digits=6, decimal_places=3, coerce_to_string=False
    )
    gpu_part_gpu_hours = serializers.FloatField(help_text="gpu_hours x billing_weight.")
    cpu_hours = serializers.FloatField(help_text="CPUs x time limit x array tasks.")
    cpu_hour_rate = serializers.DecimalField(
        source="price.cpu_hour_rate",
        max_digits=7,
        decimal_places=4,
        coerce_to_string=False,
        help_text="GPU-hours charged per CPU per hour on the partition.",
    )
    cpu_part_gpu_hours = serializers.FloatField(help_text="cpu_hours x cpu_hour_rate.")
    available_gpu_hours = serializers.FloatField(help_text="Of the allocation that would pay.")
    member_remaining_gpu_hours = serializers.FloatField(
        allow_null=True,
        help_text="What your cap on the allocation leaves you; null when you have no cap.",
    )
    fits = serializers.BooleanField(
        help_text="Whether the project can cover it now (and your cap, if you have one)."
    )
    expected_start = serializers.DateTimeField(
        allow_null=True, help_text="Slurm's estimate (sbatch --test-only); null if unknown."
    )
    rendered_script = serializers.CharField()
    cluster_unreachable = serializers.CharField(
        allow_blank=True,
        help_text="Why the cluster is not answering (the workers' last probe); empty when "
        "it is. A job made meanwhile waits, with its hold, and is submitted when it is back.",
    )


class OutputSerializer(serializers.Serializer):
    text = serializers.CharField(allow_blank=True)
    size_bytes = serializers.IntegerField(help_text="The whole file's size.")
    truncated = serializers.BooleanField(help_text="text is not the whole file.")


class JobListQuerySerializer(serializers.Serializer):
    state = serializers.CharField(
        required=False,
        help_text="One state or several, comma-separated: " + ", ".join(JobState.values),
    )
    project = serializers.CharField(required=False, help_text="A project's slug.")
    search = serializers.CharField(
        required=False, max_length=100, help_text="In the name, or a job or Slurm id (#12)."
    )

    def validate_state(self, value: str) -> list[str]:
        states = [s.strip() for s in value.split(",") if s.strip()]
        unknown = [s for s in states if s not in JobState.values]
        if unknown:
            raise serializers.ValidationError(
                f"Unknown state {unknown[0]!r}; use {', '.join(JobState.values)}."
            )
        return states


class OutputQuerySerializer(serializers.Serializer):
    stream = serializers.ChoiceField(choices=["stdout", "stderr"], default="stdout")
    tail = serializers.IntegerField(
        required=False, min_value=0, max_value=1_000_000, help_text="Only the last N lines."
    )
    array_task = serializers.IntegerField(
        required=False, min_value=0, max_value=INT32, help_text="The array task's index."
    )


# Templates.

DEFAULT_FIELDS = sorted(TEMPLATE_DEFAULT_FIELDS)


class TemplateSerializer(serializers.ModelSerializer):
    owner = related("username", null=True)
    project = related("slug", null=True)
    defaults = serializers.DictField(
        read_only=True, help_text="Values of job request fields, used where a job gives none."
    )

    class Meta:
        model = JobTemplate
        fields = [
            "id",
            "name",
            "description",
            "scope",
            "owner",
            "project",
            "defaults",
            "script",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class TemplateCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    description = serializers.CharField(required=False, allow_blank=True, max_length=10_000)
    scope = serializers.ChoiceField(choices=JobTemplate.Scope.choices, default="user")
    project = serializers.CharField(
        required=False, allow_null=True, help_text="The project's slug, for scope=project."
    )
    defaults = serializers.DictField(
        required=False,
        help_text="Job request fields and their default values: " + ", ".join(DEFAULT_FIELDS),
    )
    script = serializers.CharField(trim_whitespace=False)

    def validate_defaults(self, defaults: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(defaults) - set(DEFAULT_FIELDS))
        if unknown:
            raise serializers.ValidationError(
                f"{', '.join(unknown)}: not a job field a template sets; "
                f"use {', '.join(DEFAULT_FIELDS)}."
            )
        values = JobRequestSerializer(data=defaults)
        if not values.is_valid():
            raise serializers.ValidationError(values.errors)
        return values.canonical()
