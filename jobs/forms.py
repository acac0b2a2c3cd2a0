"""The job composer's form: typed fields in, a JobRequest out; the service does the checks.

The form only parses (numbers are numbers, the environment is NAME=value
lines); every rule about projects, partitions, paths and scripts lives in
``jobs.requests`` and comes back as ``JobInvalid``, which ``add_service_errors``
puts next to the field it names.
"""

from typing import cast

from django import forms
from django.utils.translation import gettext_lazy as _

from accounts.models import Project
from clusters.models import Partition
from jobs.errors import JobInvalid
from jobs.models import Job, JobTemplate
from jobs.requests import JobRequest


def _environment_text(environment: dict[str, str]) -> str:
    return "\n".join(f"{name}={value}" for name, value in environment.items())


def partition_choice(cluster: str, partition: str) -> str:
    """The composer's value for a partition: the same name may exist on two clusters."""
    return f"{cluster}/{partition}"


class PartitionField(forms.ChoiceField):
    """A partition as ``cluster/partition``; a bare name is taken when one cluster has it."""

    values: tuple[str, ...] = ()  # the choices' values, set with them

    def to_python(self, value):
        value = super().to_python(value)
        if value and "/" not in value:
            matches = [v for v in self.values if v.endswith(f"/{value}")]
            if len(matches) == 1:
                return matches[0]
        return value


class JobForm(forms.Form):
    project = forms.ChoiceField(label=_("Project"))
    template = forms.TypedChoiceField(
        label=_("Template"), required=False, coerce=int, empty_value=None
    )
    partition = PartitionField(label=_("Partition"))
    name = forms.CharField(label=_("Job name"), max_length=64)
    nodes = forms.IntegerField(label=_("Nodes"), initial=1)
    gpus_per_node = forms.IntegerField(label=_("GPUs per node"), initial=1)
    cpus_per_gpu = forms.IntegerField(label=_("CPUs per GPU"), required=False)
    mem_per_gpu_gb = forms.IntegerField(label=_("Memory per GPU (GB)"), required=False)
    time_limit_minutes = forms.IntegerField(label=_("Time limit (minutes)"), initial=60)
    working_directory = forms.CharField(
        label=_("Working directory"), required=False, max_length=1024
    )
    output_path = forms.CharField(label=_("Output file"), required=False, max_length=1024)
    error_path = forms.CharField(label=_("Error file"), required=False, max_length=1024)
    array = forms.CharField(label=_("Array"), required=False, max_length=64)
    # Not shown: it comes from a template (or the job submitted again) and travels with the
    # form, so the preview's script, the job and a template saved from it keep it.
    requeue = forms.NullBooleanField(required=False, widget=forms.HiddenInput)
    environment = forms.CharField(
        label=_("Environment"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "class": "code", "spellcheck": "false"}),
        help_text=_("One NAME=value per line."),
    )
    script = forms.CharField(
        label=_("Script"),
        strip=False,
        widget=forms.Textarea(attrs={"rows": 14, "class": "code", "spellcheck": "false"}),
    )

    def __init__(
        self,
        *args,
        projects: list[Project],
        partitions: list[Partition],
        templates: list[JobTemplate],
        **kwargs,
    ) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["project"]).choices = [
            (p.slug, p.name) for p in projects
        ]
        self.partitions = {partition_choice(p.cluster.name, p.name): p for p in partitions}
        clusters = sorted({p.cluster.name for p in partitions})
        choices: list = [(value, p.name) for value, p in self.partitions.items()]
        if len(clusters) > 1:  # grouped by cluster, in the order the partitions came
            choices = [
                (
                    cluster,
                    [(v, p.name) for v, p in self.partitions.items() if p.cluster.name == cluster],
                )
                for cluster in clusters
            ]
        field = cast(PartitionField, self.fields["partition"])
        field.choices, field.values = choices, tuple(self.partitions)
        if self.initial.get("partition"):  # a template's, by name
            self.initial["partition"] = field.to_python(self.initial["partition"])
        cast(forms.ChoiceField, self.fields["template"]).choices = [("", _("Blank"))] + [
            (t.pk, t.name) for t in templates
        ]

    def clean_environment(self) -> dict[str, str]:
        environment: dict[str, str] = {}
        text = self.cleaned_data.get("environment") or ""
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            name, equals, value = line.partition("=")
            if not equals:
                raise forms.ValidationError(
                    _("Line %(number)s: write NAME=value."), params={"number": number}
                )
            environment[name.strip()] = value
        return environment

    def job_request(self) -> JobRequest:
        data = self.cleaned_data
        partition = self.partitions[data["partition"]]
        return JobRequest(
            project=data["project"],
            cluster=partition.cluster.name,
            partition=partition.name,
            name=data["name"],
            nodes=data["nodes"],
            gpus_per_node=data["gpus_per_node"],
            cpus_per_gpu=data.get("cpus_per_gpu"),
            mem_per_gpu_gb=data.get("mem_per_gpu_gb"),
            time_limit_minutes=data["time_limit_minutes"],
            working_directory=data.get("working_directory") or None,
            output_path=data.get("output_path") or None,
            error_path=data.get("error_path") or None,
            environment=data.get("environment") or {},
            array=data.get("array") or "",
            requeue=data.get("requeue"),
            script=data["script"],
            template=data.get("template"),
        )

    def add_service_errors(self, error: JobInvalid) -> None:
        for field, messages in error.fields.items():
            shown = field in self.fields and not self.fields[field].widget.is_hidden
            target = field if shown else None
            for message in messages:
                self.add_error(target, message)


def initial_from_template(template: JobTemplate) -> dict:
    defaults = dict(template.defaults)
    if "environment" in defaults:
        defaults["environment"] = _environment_text(defaults["environment"])
    return {**defaults, "script": template.script, "template": template.pk}


def initial_from_job(job: Job) -> dict:
    """A finished job's request, to submit again as a new job."""
    return {
        "project": job.project.slug,
        "partition": partition_choice(job.cluster.name, job.partition.name),
        "name": job.name,
        "nodes": job.nodes,
        "gpus_per_node": job.gpus_per_node,
        "cpus_per_gpu": job.cpus_per_gpu,
        "mem_per_gpu_gb": job.mem_per_gpu_gb,
        "time_limit_minutes": job.time_limit_minutes,
        "working_directory": job.working_directory,
        "output_path": job.output_path,
        "error_path": job.error_path,
        "array": job.array,
        "requeue": job.requeue,
        "environment": _environment_text(job.environment),
        "script": job.script,
    }


class SaveTemplateForm(forms.Form):
    title = forms.CharField(label=_("Template name"), max_length=100)
    share_with_project = forms.BooleanField(label=_("Share with the project"), required=False)
