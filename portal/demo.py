"""Demo data for a dev machine: POSIX users, portal users, projects, the dev cluster
and, when ``dev/cluster-next`` runs it, the second cluster ``portal-next``.

Every step looks before it writes, so running it again changes nothing.
"""

import datetime as dt
import pwd
import secrets
import subprocess
from dataclasses import dataclass

from django.utils import timezone

from accounts.groups import ALLOCATION_MANAGERS
from accounts.ledger import allocation_grant
from accounts.models import Membership, Project, User
from accounts.reconcile import reconcile
from accounts.services import (
    membership_set,
    project_create,
    user_create,
)
from clusters.models import Cluster
from clusters.services import cluster_register, partitions_sync
from clusters.slurm import SlurmUnavailable
from portal.devstack import CLUSTER_NEXT, DEV_CLUSTER, NEXT_CLUSTER, STACK, is_running, script_env


@dataclass(frozen=True)
class DemoUser:
    username: str
    full_name: str
    what: str
    project: str | None = None
    role: str = Membership.Role.MEMBER
    is_manager: bool = False


@dataclass(frozen=True)
class DemoProject:
    slug: str
    name: str
    gpu_hours: int


PROJECTS = [
    DemoProject("vision", "Vision Lab", gpu_hours=1000),
    DemoProject("genomics", "Genomics Group", gpu_hours=250),
]
USERS = [
    DemoUser("alice", "Alice Anders", "researcher", "vision"),
    DemoUser("bob", "Bob Brandt", "researcher", "vision"),
    DemoUser("pat", "Pat Park", "PI", "vision", role=Membership.Role.PI),
    DemoUser(
        "olga", "Olga Ortiz", "outsider (PI of another project)", "genomics", Membership.Role.PI
    ),
    DemoUser("manny", "Manny Moss", "allocation manager", is_manager=True),
]


@dataclass(frozen=True)
class Login:
    username: str
    what: str
    password: str | None  # None: the user existed and kept their password


def posix_user_ensure(username: str, full_name: str) -> bool:
    """Create a Unix user with a home directory if there is none; True when created."""
    try:
        pwd.getpwnam(username)
    except KeyError:
        subprocess.run(
            ["useradd", "--create-home", "--shell", "/bin/bash", "--comment", full_name, username],
            check=True,
        )
        return True
    return False


def next_cluster_register() -> Cluster | None:
    """portal-next, reached through the prefixes ``dev/cluster-next env`` prints, when
    ``dev/cluster-next status`` finds it running; None otherwise."""
    if not is_running(CLUSTER_NEXT):
        return None
    tools = script_env(CLUSTER_NEXT)
    cluster = cluster_register(
        name=tools["SLURM_CLUSTER_NAME"],
        backend=Cluster.Backend.CLI,
        command_prefix=tools["SLURM_COMMAND_PREFIX"],
        run_as_prefix=tools["SLURM_RUN_AS_PREFIX"],
    )
    return with_slurmrestd(cluster, tools)


def with_slurmrestd(cluster: Cluster, env: dict[str, str]) -> Cluster:
    """The cluster with its slurmrestd's URL and JWT key filled in where they are empty,
    so a manager can switch it to the rest backend in the admin console."""
    if not cluster.rest_url:
        cluster.rest_url = env["SLURM_REST_URL"]
        cluster.jwt_key_file = env["SLURM_JWT_KEY_FILE"]
        cluster.save(update_fields=["rest_url", "jwt_key_file"])
    return cluster


def seed_demo(*, cluster_name: str, reset_passwords: bool = False) -> tuple[list[Login], list[str]]:
    """Create what is missing; return the demo logins and a log of what changed."""
    changes: list[str] = []
    first = cluster_register(name=cluster_name, backend=Cluster.Backend.CLI)
    clusters = [with_slurmrestd(first, script_env(STACK)) if cluster_name == DEV_CLUSTER else first]
    second = next_cluster_register()
    if second is None:
        changes.append(f"cluster {NEXT_CLUSTER}: not running (dev/cluster-next start), left out")
    elif second != clusters[0]:
        clusters.append(second)
    for cluster in clusters:
        partitions = partitions_sync(cluster=cluster)
        changes.append(
            f"cluster {cluster.name}: partitions {', '.join(p.name for p in partitions)}"
        )

    today = timezone.localdate()
    projects = {}
    for project_spec in PROJECTS:
        project = Project.objects.filter(slug=project_spec.slug).first()
        if project is None:
            project = project_create(
                slug=project_spec.slug, name=project_spec.name, slurm_account=project_spec.slug
            )
            changes.append(f"project {project_spec.slug}")
        for cluster in clusters:
            if project.allocations.filter(cluster=cluster).exists():
                continue
            allocation_grant(
                project=project,
                cluster=cluster,
                gpu_hours=project_spec.gpu_hours,
                starts_on=dt.date(today.year, 1, 1),
                ends_on=dt.date(today.year + 1, 1, 1),
                actor=None,
                reason="Demo allocation",
            )
            changes.append(
                f"allocation {project_spec.gpu_hours} GPU-h for {project_spec.slug} "
                f"on {cluster.name}"
            )
        projects[project_spec.slug] = project

    logins = []
    for spec in USERS:
        posix_username = None if spec.is_manager else spec.username
        if posix_username and posix_user_ensure(posix_username, spec.full_name):
            changes.append(f"POSIX user {posix_username}")
        user = User.objects.filter(username=spec.username).first()
        password = None
        if user is None:
            password = secrets.token_urlsafe(9)
            user = user_create(
                username=spec.username,
                password=password,
                full_name=spec.full_name,
                email=f"{spec.username}@example.org",
                posix_username=posix_username,
                is_staff=spec.is_manager,
                groups=(ALLOCATION_MANAGERS,) if spec.is_manager else (),
            )
            changes.append(f"portal user {spec.username}")
        elif reset_passwords:
            password = secrets.token_urlsafe(9)
            user.set_password(password)
            user.save(update_fields=["password"])
        if spec.project:
            membership_set(project=projects[spec.project], user=user, role=spec.role)
        logins.append(Login(spec.username, spec.what, password))

    for cluster in clusters:
        report = reconcile(cluster=cluster)
        if report.errors:
            raise SlurmUnavailable(f"{cluster.name}: " + "; ".join(report.errors))
        changes.extend(f"{cluster.name}: {action}" for action in report.actions)
    return logins, changes
