"""A benchmark's own database: the dev data is never touched.

``use(name)`` runs before ``django.setup()``: it points the portal's settings at
the database ``name`` (forced, not defaulted) and turns the query log off, so
the figures are what production runs. ``fresh(name, run)`` drops and recreates
the database, runs the benchmark in it and drops it again, whatever happens.
"""

import os
from collections.abc import Callable

import psycopg

# The portal's own role (it may create databases, it is no superuser); its password
# is dev/stack's, which the settings find in dev mode.
ROLE = "portal"

# Every column of jobs_job, in the order the benchmarks' INSERT … SELECT fills them.
JOB_COLUMNS = """
    owner_id, project_id, cluster_id, partition_id, template_id,
    name, nodes, gpus_per_node, cpus_per_gpu, mem_per_gpu_gb, time_limit_minutes,
    working_directory, output_path, error_path, environment, "array", array_tasks,
    script, rendered_script, submit_token, idempotency_key, submit_attempts,
    claimed_until, submit_error, cancel_requested_at,
    slurm_job_id, state, slurm_state, reason, exit_code,
    billing_weight, requested_gpu_seconds, used_gpu_seconds,
    created_at, submitted_at, started_at, ended_at, updated_at
"""


def url(name: str) -> str:
    return f"postgresql://{ROLE}@127.0.0.1:5432/{name}"


def use(name: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("PORTAL_ENV", "dev")  # benchmarks run on the dev stack
    os.environ["PORTAL_DATABASE_URL"] = url(name)
    os.environ["PORTAL_DEBUG"] = "false"


def admin(sql: str) -> None:
    from django.conf import settings

    with psycopg.connect(
        url("postgres"),
        password=settings.DATABASE_PASSWORD,
        autocommit=True,
        connect_timeout=5,
    ) as conn:
        conn.execute(sql)


def fresh(name: str, run: Callable[[], object]) -> None:
    from django.db import connections

    admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    admin(f"CREATE DATABASE {name}")
    try:
        run()
    finally:
        connections.close_all()
        admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def explain(sql: str, *, options: str = "ANALYZE, BUFFERS", rollback: bool = False):
    """EXPLAIN of a statement Django ran: the plan's lines and its execution time (ms);
    with ``rollback`` a writing statement is undone."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN ({options}) {sql}")
        lines = [row[0] for row in cursor.fetchall()]
        if rollback:
            transaction.set_rollback(True)
    execution = next(line for line in lines if line.startswith("Execution Time:"))
    return lines, float(execution.split()[2])
