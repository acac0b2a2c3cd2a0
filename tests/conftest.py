"""Fixtures shared by every test: the live dev stack, personas, a real Celery worker."""

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest

from portal.devstack import STACK, script_env
from tests.slurm_accounts import DEV_CLUSTER, SlurmOperator

REPO = Path(__file__).resolve().parent.parent


# The test files that take longest (seconds with five processes on two cores), longest
# first: they are handed to test processes first, so that the parallel part does not end
# with one process still running a long file that started last. ``--dist loadfile`` hands
# files out in the order they are collected only with ``--no-loadscope-reorder`` (the
# Makefile's): by default pytest-xdist hands out the files with most tests first, and the
# one-test fault drills of a minute came last. Measured with ``--junitxml``.
LONGEST_FILES = (
    "tests/jobs/test_forged_tokens.py",  # 243 s
    "tests/clusters/test_contract_dev.py",  # 203 s
    "tests/accounts/test_reconcile.py",  # 194 s
    "tests/portal/test_crawl.py",  # 161 s
    "tests/jobs/test_invariants.py",  # 132 s
    "tests/jobs/test_requeue_runs.py",  # ~130 s (six jobs run twice or moved)
    "tests/jobs/test_job_submit.py",  # 129 s
    "tests/security/test_authorization_matrix.py",  # 116 s
    "tests/accounts/test_adoption.py",  # 86 s
    "tests/clusters/test_contract_next.py",  # 76 s
    "tests/security/test_crafted_names.py",  # ~65 s (47 s alone; not yet measured so)
    "tests/browser/test_researcher.py",  # 54 s
    "tests/faults/test_worker_kill.py",  # 52 s
    "tests/jobs/test_pipeline.py",  # 45 s
    "tests/faults/test_restore.py",  # 44 s
    "tests/security/test_script_injection.py",  # 42 s
    "tests/security/test_path_traversal.py",  # 42 s
    "tests/faults/test_postgres.py",  # 39 s
    "tests/jobs/test_two_clusters.py",  # 36 s
    "tests/jobs/test_submit_faults.py",  # 34 s
    "tests/jobs/test_job_mail_slurm.py",  # 32 s
    "tests/faults/test_beat_twice.py",  # 30 s
    "tests/client/test_on_the_dev_cluster.py",  # 30 s
    "tests/browser/test_two_clusters.py",  # 30 s
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of the dev stack itself, and every fault test but those that break only
    processes they started themselves (``fault(own_processes=True)``), stops or restarts
    what the whole machine shares: each is ``exclusive`` (``make test`` runs them alone),
    but those of a module that says ``STOPS_NOTHING = True``. The ``LONGEST_FILES`` come first."""
    for item in items:
        in_dev = Path(str(item.fspath)).parent.name == "dev" and not getattr(
            item.module, "STOPS_NOTHING", False
        )
        fault = item.get_closest_marker("fault")
        if in_dev or (fault and not fault.kwargs.get("own_processes")):
            item.add_marker(pytest.mark.exclusive)
    rank = {name: place for place, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


DB_FIXTURES = {"db", "transactional_db", "live_server", "django_db_reset_sequences"}


@pytest.fixture(scope="session")
def django_db_modify_db_settings(request, django_db_modify_db_settings_parallel_suffix) -> None:
    """xdist's workers each test in a database of their own (``test_portal_gw0``, ...); a
    run outside xdist gets one named after its process, so that two runs side by side
    (an engineer's loop beside ``make test``'s lone lane) never drop each other's."""
    if hasattr(request.config, "workerinput"):
        return
    from django.conf import settings

    database = settings.DATABASES["default"]
    database.setdefault("TEST", {})["NAME"] = f"test_{database['NAME']}_p{os.getpid()}"


@pytest.fixture(scope="session")
def _seeded_by_migrations(django_db_setup, django_db_blocker) -> str:
    """The rows the migrations seed (the allocation managers' group with its
    permissions, the global templates), as JSON, taken right after migrating."""
    from django.contrib.auth.models import Group
    from django.core import serializers

    from jobs.models import JobTemplate

    with django_db_blocker.unblock():
        rows = [*Group.objects.all(), *JobTemplate.objects.filter(scope="global")]
        return serializers.serialize("json", rows, use_natural_foreign_keys=True)


@pytest.fixture(autouse=True)
def _migrations_seeded_rows_are_there(request):
    """A transactional test empties every table when it ends, the seeded rows too; under
    pytest-xdist modules interleave, so the next test may be any. Each test that uses
    the database finds them there again (restored when missing, one query when not)."""
    uses_db = DB_FIXTURES & set(request.fixturenames)
    if not (uses_db or request.node.get_closest_marker("django_db")):
        return
    seeded = request.getfixturevalue("_seeded_by_migrations")
    with request.getfixturevalue("django_db_blocker").unblock():
        seeded_rows_restore(seeded)


def seeded_rows_restore(seeded: str) -> None:
    """Put back the rows the migrations seeded (``_seeded_by_migrations``) if a
    transactional test emptied the tables; one query when they are there."""
    from django.contrib.auth.models import Group
    from django.core import serializers

    from accounts.groups import ALLOCATION_MANAGERS

    if not Group.objects.filter(name=ALLOCATION_MANAGERS).exists():
        for row in serializers.deserialize("json", seeded, handle_forward_references=True):
            row.save()


def stack_value(name: str) -> str:
    """One of the variables ``dev/stack env`` prints (the dev cluster's REST URL, JWT key…)."""
    return script_env(STACK)[name]


def redis_shutdown() -> None:
    """Redis dies without saving (as a server without persistence would): what was
    queued is lost. ``dev/stack start redis`` brings it back, with its password."""
    from django.conf import settings

    subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "shutdown", "nosave"],
        env={**os.environ, "REDISCLI_AUTH": settings.REDIS_PASSWORD},
        capture_output=True,
        check=False,
    )


def through_slurmrestd(cluster):
    """The dev cluster (or portal-next), reached through its slurmrestd with JWTs the
    portal mints. On portal-dev, projects made before the switch have their limits:
    22.05's REST API cannot set them."""
    from clusters.models import Cluster
    from portal.devstack import CLUSTER_NEXT, NEXT_CLUSTER

    env = script_env(CLUSTER_NEXT if cluster.name == NEXT_CLUSTER else STACK)
    Cluster.objects.filter(pk=cluster.pk).update(
        backend=Cluster.Backend.REST,
        rest_url=env["SLURM_REST_URL"],
        jwt_key_file=env["SLURM_JWT_KEY_FILE"],
    )
    cluster.refresh_from_db()
    return cluster


@pytest.fixture(scope="session")
def slurm_stack():
    """The dev Slurm cluster must be up: `make test` starts it, so say how when it is not."""
    status = subprocess.run(
        [str(REPO / "dev" / "stack"), "status"], capture_output=True, text=True, check=False
    )
    if status.returncode != 0:
        pytest.fail(
            "The dev stack is not running; start it with `dev/stack start` "
            f"(`make test` does):\n{status.stdout}{status.stderr}",
            pytrace=False,
        )


@pytest.fixture(autouse=True, scope="session")
def _fast_password_hashing():
    """A persona's password costs 0.4 s of PBKDF2 and the suite makes thousands of them;
    tests hash with MD5 (and still read PBKDF2 hashes). A process of its own (a worker,
    a production-mode check) keeps the portal's hashers: a test that logs in there
    makes its user's hash with PBKDF2."""
    from django.test.utils import override_settings

    fast = override_settings(
        PASSWORD_HASHERS=[
            "django.contrib.auth.hashers.MD5PasswordHasher",
            "django.contrib.auth.hashers.PBKDF2PasswordHasher",
        ]
    )
    fast.enable()  # setting_changed clears Django's cache of hashers
    yield
    fast.disable()


@pytest.fixture(autouse=True)
def _english_after_each_test():
    """A request leaves its language active in the test thread; the next test starts in English."""
    yield
    from django.utils import translation

    translation.activate("en")


@pytest.fixture(autouse=True)
def _slurm_marked_tests_need_the_stack(request):
    if request.node.get_closest_marker("slurm"):
        request.getfixturevalue("slurm_stack")


@pytest.fixture
def dev_cluster(db, slurm_stack, celery_worker):
    """The dev cluster registered with the partitions Slurm reports, probed as beat
    would (estimates ask a cluster only when its last probe found it up), with the
    session's worker running: the web tier asks a worker for what only workers may do
    (an estimate's start, a job's output)."""
    from clusters.services import cluster_probe, cluster_register, partitions_sync

    cluster = cluster_register(name=DEV_CLUSTER)
    partitions_sync(cluster=cluster)
    cluster_probe(cluster=cluster)
    return cluster


@pytest.fixture
def next_cluster(db, slurm_stack, celery_worker):
    """The second dev cluster, portal-next (the other Debian release's Slurm in a root of
    its own, ``dev/cluster-next``), registered with its client tools' prefixes, its
    partitions and a probe, like ``dev_cluster``. ``make test`` starts it; with
    PORTAL_CLUSTER_NEXT=off the stack leaves it out and these tests are skipped."""
    from clusters.services import cluster_probe, partitions_sync
    from portal.demo import next_cluster_register

    if os.environ.get("PORTAL_CLUSTER_NEXT") == "off":
        pytest.skip("PORTAL_CLUSTER_NEXT=off: the stack runs no portal-next")
    cluster = next_cluster_register()
    if cluster is None:
        pytest.fail("portal-next is not running; `dev/stack start` starts it", pytrace=False)
    partitions_sync(cluster=cluster)
    cluster_probe(cluster=cluster)
    return cluster


def _user(username: str, **extra):
    from accounts.services import user_create

    return user_create(username=username, password=f"{username}-pass-1234", **extra)


@pytest.fixture
def alice(db):
    return _user("alice", posix_username="alice")


@pytest.fixture
def bob(db):
    return _user("bob", posix_username="bob")


@pytest.fixture
def charlie(db):
    return _user("charlie", posix_username="charlie")


@pytest.fixture
def manny(db):
    """An allocation manager: staff, in the group that runs the admin console."""
    from accounts.groups import ALLOCATION_MANAGERS

    return _user("manny", is_staff=True, groups=(ALLOCATION_MANAGERS,))


# Beat's periodic work at the fastest intervals settings allow, so a job is seen
# running and ending within a second or two (the minimums are in portal/settings.py).
FAST_BEAT_ENV = {
    "PORTAL_QUEUE_SYNC_INTERVAL_S": "1",
    "PORTAL_ACCOUNTING_INTERVAL_S": "5",
    "PORTAL_SUBMIT_SWEEP_INTERVAL_S": "5",
    "PORTAL_CLUSTER_PROBE_INTERVAL_S": "1",
}


def process_stop(process: subprocess.Popen, *, within_s: float = 15) -> None:
    """Ask a process the tests started to end (TERM), and kill it if it has not within
    ``within_s``."""
    process.terminate()
    try:
        process.wait(timeout=within_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def running_worker(*, beat: bool = False, concurrency: int = 2, queue: str = "", **extra_env: str):
    """A real Celery worker process on the test database; yields (queue, hostname, process).

    It runs ``concurrency`` worker processes (the bench of scale-out varies them) and
    takes tasks from a queue of its own (named ``queue`` if given: a test may have
    enqueued there before it starts); while it runs the test process
    enqueues there too (e.g. a job's submission on commit); tests that need it
    commit their data (``transactional_db``). ``extra_env`` configures it. With
    ``beat`` the worker runs beat too (``FAST_BEAT_ENV`` unless ``extra_env`` says
    otherwise), its schedule in a file of its own, so the queue sync, accounting and
    the submission sweeper run as in production, only faster.
    """
    from django.db import connection

    from portal.celery import app

    queue = queue or f"test-{uuid.uuid4().hex[:8]}"
    hostname = f"{queue}@localhost"
    log = REPO / "var" / f"{queue}.log"
    log.parent.mkdir(exist_ok=True)
    db = connection.settings_dict
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "PORTAL_DATABASE_URL": f"postgresql://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "PORTAL_TASK_QUEUE": queue,
        # Its metrics beside the test process's, which /metrics adds up (portal.testenv);
        # in memory where no folder is set (the benches).
        **(
            {"PROMETHEUS_MULTIPROC_DIR": os.path.join(os.environ["PORTAL_METRICS_DIR"], queue)}
            if os.environ.get("PORTAL_METRICS_DIR")
            else {}
        ),
        **(FAST_BEAT_ENV if beat else {}),
        **extra_env,
    }
    command = [sys.executable, "-m", "celery", "-A", "portal", "worker", "--queues", queue,
               "--hostname", hostname, "--concurrency", str(concurrency),
               "--loglevel", "INFO"]  # fmt: skip
    schedule_dir = Path(tempfile.mkdtemp(prefix="beat-")) if beat else None
    if schedule_dir:
        # A fresh schedule each time: a stale one would carry another run's last-run times.
        command += ["--beat", "--schedule", str(schedule_dir / "schedule")]
    with log.open("w") as log_file:
        process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=log_file, stderr=subprocess.STDOUT
        )
    default_queue = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    try:
        deadline = time.monotonic() + 30
        while not app.control.ping(destination=[hostname], timeout=0.5):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the test Celery worker did not start; see {log}", pytrace=False)
        yield queue, hostname, process
    finally:
        app.conf.task_default_queue = default_queue
        process_stop(process)
        if schedule_dir:
            shutil.rmtree(schedule_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def celery_worker(django_db_setup):
    """One worker for the whole session; yields (queue, hostname)."""
    with running_worker() as (queue, hostname, _):
        yield queue, hostname


@pytest.fixture
def make_project(dev_cluster):
    """make_project(members={user: role}, gpu_hours=…, in_slurm=True, clusters=…): a
    project with an active allocation on each of ``clusters`` (the dev cluster unless
    told); with ``in_slurm`` the reconciler has given its account, associations and
    limit to each cluster's Slurm. The Slurm account is unique per test."""
    from accounts.reconcile import reconcile
    from accounts.services import membership_set, project_create
    from tests.factories import month_allocation

    made: list[tuple[str, object]] = []

    def make(*, members, gpu_hours=100, in_slurm=True, clusters=(dev_cluster,)):
        account = f"j{uuid.uuid4().hex[:10]}"
        project = project_create(slug=account, name=f"Jobs {account}", slurm_account=account)
        for user, role in members.items():
            membership_set(project=project, user=user, role=role)
        for cluster in clusters:
            made.append((account, cluster))
            month_allocation(project, cluster, gpu_hours=gpu_hours)
            if in_slurm:
                report = reconcile(cluster=cluster)
                assert not report.errors, report.errors
        return project

    yield make
    for account, cluster in made:
        SlurmOperator(cluster.name, cluster.command_prefix).account_remove(account)


def workdir_of(login: str):
    """A fresh directory in ``login``'s home, owned by them; removed afterwards."""
    entry = pwd.getpwnam(login)
    path = Path(entry.pw_dir) / "portal-tests" / uuid.uuid4().hex[:8]
    path.mkdir(parents=True)
    for part in (path.parent, path):
        os.chown(part, entry.pw_uid, entry.pw_gid)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def workdir(alice):
    """A fresh directory in alice's home, owned by her; removed afterwards."""
    yield from workdir_of("alice")
