"""From a user's job request to a checked, rendered, priced job: shared by create and estimate.

A request names what the user typed; every field left out (``None``) takes the
template's default, then the portal's. Identity comes from the user row: the
project must be one of theirs, the Slurm user is their ``posix_username``, the
account is the project's — none of it is taken from the request.
"""

import dataclasses
import pwd
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.utils.translation import gettext as _

from accounts.models import Project, User
from accounts.permissions import membership_of
from accounts.selectors import max_submit_jobs_for
from clusters.errors import NoSuchCluster
from clusters.models import Cluster, Partition
from clusters.selectors import cluster_named, clusters_enabled
from jobs import paths, pricing, scripts, specs
from jobs.errors import JobInvalid
from jobs.models import Job, JobTemplate
from jobs.selectors import templates_visible_to, unfinished_tasks_of
from jobs.states import TERMINAL_STATES, JobState

# Slurm's own defaults: one file per job, or per array task.
DEFAULT_OUTPUT = "slurm-%j.out"
DEFAULT_ARRAY_OUTPUT = "slurm-%A_%a.out"


@dataclass(frozen=True)
class JobRequest:
    project: str | None = None  # the project's slug
    cluster: str | None = None  # optional when there is one cluster
    partition: str | None = None  # the cluster's default when left out
    name: str | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    cpus_per_gpu: int | None = None
    mem_per_gpu_gb: int | None = None
    time_limit_minutes: int | None = None
    working_directory: str | None = None  # the owner's home when left out
    output_path: str | None = None
    error_path: str | None = None
    environment: dict[str, str] | None = None
    array: str | None = None
    requeue: bool | None = None  # whether Slurm may run it again; off unless asked for
    depends_on: tuple[int, ...] | None = None  # portal job ids
    script: str | None = None
    template: int | None = None  # a template id: its values are defaults


BUILT_IN_DEFAULTS: dict[str, Any] = {
    "name": "job",
    "nodes": 1,
    "gpus_per_node": 1,
    "time_limit_minutes": 60,
    "environment": {},
    "array": "",
    "requeue": False,
    "depends_on": (),
}

# The fields a template may give defaults for: the job's shape. Not who pays or where
# (project, cluster), not its wiring (template, depends_on), and not the script: a
# template has a script of its own. The service, the API and the form all use this list.
TEMPLATE_DEFAULT_FIELDS = (
    "partition", "name", "nodes", "gpus_per_node", "cpus_per_gpu", "mem_per_gpu_gb",
    "time_limit_minutes", "working_directory", "output_path", "error_path", "environment",
    "array", "requeue",
)  # fmt: skip


@dataclass(frozen=True)
class PreparedJob:
    """A request that passed every check: what create saves and estimate shows."""

    owner: User
    posix_user: str
    project: Project
    cluster: Cluster
    partition: Partition
    template: JobTemplate | None
    spec: specs.JobSpec
    dependencies: list[Job] = field(default_factory=list)
    array_tasks: int = 1
    price: pricing.Price = field(
        default_factory=lambda: pricing.Price(0, 0, Decimal(1), Decimal(0))
    )
    rendered_script: str = ""

    @property
    def billing_weight(self) -> Decimal:
        return self.price.billing_weight

    @property
    def cpu_hour_rate(self) -> Decimal:
        return self.price.cpu_hour_rate

    @property
    def requested_gpu_seconds(self) -> int:
        return self.price.total


def _with_defaults(request: JobRequest, user: User) -> tuple[dict[str, Any], JobTemplate | None]:
    values: dict[str, Any] = dict(BUILT_IN_DEFAULTS)
    template = None
    if request.template is not None:
        template = templates_visible_to(user).filter(pk=request.template).first()
        if template is None:
            raise JobInvalid.one(
                "template",
                _("There is no template %(id)s for you.") % {"id": request.template},
            )
        values.update({k: v for k, v in template.defaults.items() if k in TEMPLATE_DEFAULT_FIELDS})
        values["script"] = template.script
    values.update({k: v for k, v in dataclasses.asdict(request).items() if v is not None})
    return values, template


def _project(user: User, slug: str | None) -> Project:
    if not slug:
        raise JobInvalid.one("project", _("Choose the project that pays for the job."))
    membership = membership_of(user, slug)
    if membership is None:
        raise JobInvalid.one(
            "project", _("You are not a member of a project %(slug)s.") % {"slug": repr(slug)}
        )
    return membership.project


def _cluster(name: str | None, partition: str | None) -> Cluster:
    """The cluster named; left out, the one whose partition is named, if only one has
    it, or else the only cluster."""
    if not name and partition:
        found = list(clusters_enabled().filter(partitions__name=partition).distinct()[:2])
        if len(found) == 1:
            return found[0]
    try:
        return cluster_named(name)
    except NoSuchCluster as error:
        raise JobInvalid.one("cluster", str(error)) from None


def _partition(cluster: Cluster, name: str | None) -> Partition:
    partitions = Partition.objects.filter(cluster=cluster)
    if name:
        try:
            partition = partitions.get(name=name)
        except Partition.DoesNotExist:
            partition = None
    else:
        # Slurm has one default partition; by name if a stale sync left two.
        partition = partitions.filter(is_default=True).order_by("name").first()
    if partition is None:
        known = ", ".join(partitions.values_list("name", flat=True)) or _("none synced yet")
        where = {"name": repr(name), "cluster": cluster, "known": known}
        if name:
            message = _("There is no partition %(name)s on %(cluster)s; choose one of: %(known)s.")
        else:
            message = _(
                "The cluster has no default partition on %(cluster)s; choose one of: %(known)s."
            )
        raise JobInvalid.one("partition", message % where)
    if not partition.is_up:
        raise JobInvalid.one(
            "partition",
            _("Partition %(name)s is down; choose another.") % {"name": partition.name},
        )
    return partition


def _dependencies(user: User, ids: tuple[int, ...] | list[int]) -> list[Job]:
    wanted = [int(i) for i in ids]
    if not wanted:
        return []
    found = {job.pk: job for job in Job.objects.filter(owner=user, pk__in=wanted)}
    missing = [str(i) for i in wanted if i not in found]
    if missing:
        raise JobInvalid.one(
            "depends_on", _("You have no job %(ids)s.") % {"ids": ", ".join(missing)}
        )
    failed = [f"#{job.pk}" for job in found.values() if job.state in DEPENDENCY_NEVER_OK]
    if failed:
        raise JobInvalid.one(
            "depends_on",
            _("%(jobs)s ended without success, so this job could never start.")
            % {"jobs": ", ".join(failed)},
        )
    return list(found.values())


# Every end but success: a job waiting on one of these could never start.
DEPENDENCY_NEVER_OK = TERMINAL_STATES - {JobState.COMPLETED}


def _int(values: dict[str, Any], name: str, *, optional: bool = False) -> int | None:
    value = values.get(name)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            return int(str(value))
        except ValueError:
            raise JobInvalid.one(name, _("Give a whole number.")) from None
    return value


def requeue_of(values: Mapping[str, Any]) -> bool:
    """Whether Slurm may run the job again: only when ``values`` say true. JobInvalid on
    ``requeue`` for anything but a boolean (a template's defaults are JSON an allocation
    manager may have typed)."""
    requeue = values.get("requeue")
    if requeue is None:
        return False
    if not isinstance(requeue, bool):
        raise JobInvalid.one(
            "requeue", _("Requeue is true or false, not %(given)s.") % {"given": repr(requeue)}
        )
    return requeue


def home_of(posix_user: str) -> str:
    try:
        return pwd.getpwnam(posix_user).pw_dir
    except KeyError:
        raise JobInvalid.one(
            "__all__",
            _("Your Unix login %(login)s does not exist on this host; ask an administrator.")
            % {"login": repr(posix_user)},
        ) from None


def _check_array_size(project: Project, cluster: Cluster, tasks: int) -> None:
    """Refuse an array larger than Slurm's MaxSubmitJobs on the project's account: Slurm
    counts every array task, so it could only end ``submit_failed``."""
    limit = max_submit_jobs_for(project=project, cluster=cluster)
    if tasks > limit:
        raise JobInvalid.one(
            "array",
            _(
                "This array has %(tasks)s tasks, and Slurm counts each one: %(project)s lets "
                "each user have at most %(limit)s jobs queued or running on %(cluster)s "
                "(MaxSubmitJobs). Split it into arrays of at most %(limit)s tasks."
            )
            % {"limit": limit, "tasks": tasks, "project": project.slug, "cluster": cluster.name},
        )


def submit_limit_check(prepared: PreparedJob, *, excluding: int | None = None) -> None:
    """Refuse a job that Slurm's MaxSubmitJobs would refuse once the owner's unfinished
    jobs of the project on the cluster are counted (``excluding`` the job itself, when it
    is already saved), so none is saved that can only end ``submit_failed``. Slurm counts
    every array task, pending or running; so does the portal (a partly finished array in
    full, so it may refuse a little early). Work submitted outside the portal is not
    seen: Slurm stays the hard stop for it. Job creation calls this under the lock of
    the allocation its hold takes, so two creations cannot both count before either is
    saved."""
    project, cluster, tasks = prepared.project, prepared.cluster, prepared.array_tasks
    limit = max_submit_jobs_for(project=project, cluster=cluster)
    queued = unfinished_tasks_of(
        prepared.owner, project=project, cluster=cluster, excluding=excluding
    )
    if queued + tasks > limit:
        raise JobInvalid.one(
            "array" if tasks > 1 else "__all__",
            _(
                "You have %(queued)s jobs queued or running in %(project)s on %(cluster)s "
                "(each array task counted) and this adds %(tasks)s; Slurm lets each user "
                "have at most %(limit)s (MaxSubmitJobs). Wait for some to end, or cancel some."
            )
            % {
                "queued": queued,
                "tasks": tasks,
                "project": project.slug,
                "cluster": cluster.name,
                "limit": limit,
            },
        )


def job_prepare(*, user: User, request: JobRequest, submit_token: str = "") -> PreparedJob:
    """Check a request against the user's projects and the partition's real limits,
    render its script and price it; raise JobInvalid naming each field to fix."""
    posix_user = _posix_user(user)
    values, template = _with_defaults(request, user)
    project = _project(user, values.get("project"))
    cluster = _cluster(values.get("cluster"), values.get("partition"))
    partition = _partition(cluster, values.get("partition"))
    working_directory, output_path, error_path = _paths(values, posix_user)
    environment = _environment(values)
    dependencies = _dependencies(user, values.get("depends_on") or ())
    spec = specs.JobSpec(
        name=str(values.get("name") or ""),
        account=project.slurm_account,
        partition=partition.name,
        nodes=_int(values, "nodes") or 0,
        gpus_per_node=_int(values, "gpus_per_node") or 0,
        cpus_per_gpu=_int(values, "cpus_per_gpu", optional=True),
        mem_per_gpu_gb=_int(values, "mem_per_gpu_gb", optional=True),
        time_limit_minutes=_int(values, "time_limit_minutes") or 0,
        working_directory=working_directory,
        output_path=output_path,
        error_path=error_path,
        environment=environment,
        array=str(values.get("array") or ""),
        after_ok=tuple(job.slurm_job_id for job in dependencies if job.slurm_job_id),
        script=str(values.get("script") or ""),
        submit_token=submit_token,
        requeue=requeue_of(values),
    )
    specs.validate_spec(
        spec,
        max_time_minutes=partition.max_time_minutes,
        max_gpus_per_node=partition.gpus_per_node,
        max_nodes=max(partition.nodes, 1),
        max_script_bytes=settings.JOB_MAX_SCRIPT_BYTES,
    )
    array_tasks = specs.array_task_count(spec.array)
    _check_array_size(project, cluster, array_tasks)
    return PreparedJob(
        owner=user,
        posix_user=posix_user,
        project=project,
        cluster=cluster,
        partition=partition,
        template=template,
        spec=spec,
        dependencies=dependencies,
        array_tasks=array_tasks,
        price=_price(spec, partition, array_tasks),
        rendered_script=scripts.render_script(spec),
    )


def _posix_user(user: User) -> str:
    """The Unix login the job runs as, from the database."""
    if not user.posix_username:
        raise JobInvalid.one(
            "__all__", _("Your account has no Unix login yet; ask an administrator to set one.")
        )
    return user.posix_username


def _paths(values: dict[str, Any], posix_user: str) -> tuple[str, str, str]:
    """The working directory and the output and error paths, each inside the user's allowed
    roots; the defaults fill what the request left out."""
    roots = paths.allowed_roots(posix_user, settings.JOB_ROOTS)
    working_directory = paths.check_directory(
        values.get("working_directory") or home_of(posix_user),
        roots=roots,
        field="working_directory",
    )
    default_output = DEFAULT_ARRAY_OUTPUT if values.get("array") else DEFAULT_OUTPUT
    output_path = paths.check_output_path(
        values.get("output_path") or default_output,
        working_directory=working_directory,
        roots=roots,
        field="output_path",
    )
    error_path = paths.check_output_path(
        values.get("error_path") or values.get("output_path") or default_output,
        working_directory=working_directory,
        roots=roots,
        field="error_path",
    )
    return working_directory, output_path, error_path


def paths_refusal(
    *, posix_user: str, working_directory: str, output_path: str, error_path: str
) -> str | None:
    """Why a saved job's paths may not be used any more, or None: the request's checks,
    run again by the worker right before sbatch. The web tier cannot look inside a home
    it may not read (0700), so a symbolic link there out of the allowed folders is seen
    only here, as is one put in after the job was saved."""
    values = {
        "working_directory": working_directory,
        "output_path": output_path,
        "error_path": error_path,
    }
    try:
        _paths(values, posix_user)
    except JobInvalid as invalid:
        return " ".join(message for messages in invalid.fields.values() for message in messages)
    return None


def _environment(values: dict[str, Any]) -> dict[str, str]:
    environment = values.get("environment") or {}
    if not isinstance(environment, dict):
        raise JobInvalid.one("environment", _("Give the environment as names and values."))
    return {str(key): str(value) for key, value in environment.items()}


def _price(spec: specs.JobSpec, partition: Partition, array_tasks: int) -> pricing.Price:
    """What the request holds: every task for its whole time limit, at the partition's
    billing weight and CPU-hour rate."""
    return pricing.requested_price(
        nodes=spec.nodes,
        gpus_per_node=spec.gpus_per_node,
        cpus=pricing.cpus_per_task(
            nodes=spec.nodes, gpus_per_node=spec.gpus_per_node, cpus_per_gpu=spec.cpus_per_gpu
        ),
        time_limit_minutes=spec.time_limit_minutes,
        array_tasks=array_tasks,
        billing_weight=partition.billing_weight,
        cpu_hour_rate=partition.cpu_hour_rate,
    )
