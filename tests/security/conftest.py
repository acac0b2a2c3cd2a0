"""Shared by the security tests: a cluster that needs no Slurm, cheap personas, funded projects."""

from collections.abc import Iterator
from contextlib import contextmanager

from django.contrib.auth.models import Group
from django.db import transaction

from accounts.groups import ALLOCATION_MANAGERS
from accounts.models import Project, User
from accounts.services import membership_set, project_create
from clusters.models import Cluster, Partition
from tests.factories import month_allocation


def person(
    username: str, *, posix: str | None = None, staff: bool = False, manager: bool = False
) -> User:
    """A user without a usable password: no hashing, so dozens cost nothing. Tests sign
    them in with ``force_login``."""
    user = User.objects.create_user(username=username, posix_username=posix, is_staff=staff)
    if manager:
        user.groups.add(Group.objects.get(name=ALLOCATION_MANAGERS))
    return user


def offline_cluster_create() -> Cluster:
    """The portal's only cluster, with a ``debug`` partition (8 GPUs, 60 minutes), whose
    Slurm is never reached: its slurmrestd address refuses connections and it has no JWT
    key, so a health probe fails at once, and the rest backend asks Slurm nothing for an
    estimate. Tests that use it need no Slurm; jobs they create are never submitted (the
    test's transaction never commits, so nothing is enqueued)."""
    cluster = Cluster.objects.create(
        name="sec-offline",
        backend=Cluster.Backend.REST,
        rest_url="http://127.0.0.1:9",
        jwt_key_file="/nonexistent/sec-offline.key",
    )
    Partition.objects.create(
        cluster=cluster,
        name="debug",
        is_default=True,
        is_up=True,
        max_time_minutes=60,
        nodes=1,
        gpus_per_node=8,
        total_gpus=8,
    )
    return cluster


def funded_project(
    slug: str, *, cluster: Cluster, members: dict[User, str], gpu_hours: int = 100
) -> Project:
    """A project with ``members`` ({user: role}) and an active allocation on ``cluster``."""
    project = project_create(slug=slug, name=f"Project {slug}", slurm_account=slug)
    for user, role in members.items():
        membership_set(project=project, user=user, role=role)
    month_allocation(project, cluster, gpu_hours=gpu_hours, reason="security tests")
    return project


@contextmanager
def kept_for_the_module(django_db_blocker, seeded: str) -> Iterator[None]:
    """Rows written inside stay for a module's tests and are rolled back after them.

    Each test still runs in a savepoint of its own (pytest-django's ``db``), as with
    Django's ``TestCase.setUpTestData``, so one test's writes never reach the next. The
    rows the migrations seed (``seeded``, the session's ``_seeded_by_migrations``) are put
    back first: a transactional test of another module may have emptied the tables.
    """
    from tests.conftest import seeded_rows_restore

    with django_db_blocker.unblock(), transaction.atomic():
        seeded_rows_restore(seeded)
        yield
        transaction.set_rollback(True)
