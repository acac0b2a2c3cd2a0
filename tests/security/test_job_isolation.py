"""Code inside a job reaches neither the portal's services nor Slurm's.

A real job, submitted as alice through the portal, tries what any researcher's code
could try on the node it runs on: PostgreSQL as ``postgres`` and as the portal's own
role (TCP and the Unix socket), Redis, MariaDB (which holds Slurm's accounting and
association limits) as root, anonymously and as each cluster's slurmdbd user (no
password, or the one the repository once shipped), and the files that hold the stack's
secrets, the clusters' JWT keys and their ``slurmdbd.conf``. Each must be refused, and
say so in the service's own words: a missing tool, a service that is down or a typo
in a probe answers otherwise and fails the test. On the dev stack the job runs on the
same host as the services, so this is the harshest place to try.
"""

import os
import re
import shlex
import socket
from pathlib import Path

import pytest

from jobs.selectors import job_output
from jobs.services import job_create
from jobs.states import JobState
from jobs.submission import job_submit
from portal.devstack import CLUSTER_NEXT, script_env
from tests.conftest import stack_value
from tests.factories import request_for, run_to_the_end

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]

# What each refuses with. redis-cli exits 0 on an error reply, so the words decide.
POSTGRESQL = r"fe_sendauth: no password supplied|password authentication failed for user"
REDIS = r"\b(NOAUTH|WRONGPASS)\b"
MARIADB = r"ERROR 1(045|698) \(28000\): Access denied for user"
A_FILE = r": Permission denied$"
# A server may not listen on ::1 at all (PostgreSQL's default "localhost" is 127.0.0.1
# alone where /etc/hosts says so): the job must then meet that, and nothing else.
NOTHING_LISTENS = r"Connection refused"
IPV6_PORTS = {"postgres over TCP (IPv6)": 5432, "redis (IPv6)": 6379}

# Each: a command that would get in, and the refusal it must meet instead.
SERVICES = {
    "postgres over TCP": ("psql -w -h 127.0.0.1 -U postgres -d postgres -c 'SELECT 1'", POSTGRESQL),
    "postgres over TCP (IPv6)": (
        "psql -w -h ::1 -U postgres -d postgres -c 'SELECT 1'",
        POSTGRESQL,
    ),
    "postgres over the socket": ("psql -w -U postgres -d postgres -c 'SELECT 1'", POSTGRESQL),
    "portal role over TCP": ("psql -w -h 127.0.0.1 -U portal -d portal -c 'SELECT 1'", POSTGRESQL),
    "portal role over the socket": ("psql -w -U portal -d portal -c 'SELECT 1'", POSTGRESQL),
    "redis": ("redis-cli -h 127.0.0.1 ping", REDIS),
    "redis (IPv6)": ("redis-cli -h ::1 ping", REDIS),
    "redis, a key": ("redis-cli -h 127.0.0.1 -n 1 set probe 1", REDIS),
    "mariadb root over the socket": ("mysql -uroot -e 'SELECT 1'", MARIADB),
    "mariadb root over TCP": ("mysql -h127.0.0.1 -uroot -e 'SELECT 1'", MARIADB),
    "mariadb anonymous": ("mysql -e 'SELECT 1'", MARIADB),
    "mariadb slurm, no password": ("mysql -uslurm -e 'SELECT 1'", MARIADB),
    "mariadb slurm, the old dev password": (
        "mysql -uslurm -pslurm-dev-only -e 'SELECT 1'",
        MARIADB,
    ),
    # portal-next's slurmdbd user (DB_USER in dev/cluster-next), made for 127.0.0.1 alone.
    "mariadb slurm_next, no password": ("mysql -h127.0.0.1 -uslurm_next -e 'SELECT 1'", MARIADB),
}


def files_to_read() -> dict[str, Path]:
    """The stack's secrets, one by one, and each cluster's JWT key and slurmdbd.conf."""
    secrets = Path(stack_value("PORTAL_STACK_DIR")) / "secrets"
    files = {f"the stack secret {path.name}": path for path in sorted(secrets.iterdir())}
    files["portal-dev's JWT key"] = Path(stack_value("SLURM_JWT_KEY_FILE"))
    files["portal-dev's slurmdbd.conf"] = Path("/etc/slurm/slurmdbd.conf")
    if os.environ.get("PORTAL_CLUSTER_NEXT") != "off":
        next_env = script_env(CLUSTER_NEXT)
        files["portal-next's JWT key"] = Path(next_env["SLURM_JWT_KEY_FILE"])
        files["portal-next's slurmdbd.conf"] = (
            Path(next_env["SLURM_ROOT"]) / "etc/slurm/slurmdbd.conf"
        )
    return files


def listens_on_ipv6(port: int) -> bool:
    try:
        socket.create_connection(("::1", port), timeout=2).close()
    except OSError:
        return False
    return True


def probe_script(probes: dict[str, tuple[str, str]]) -> str:
    """One line per probe: its name, a tab, and all it printed, on one line."""
    return "".join(
        f"printf '%s\\t%s\\n' {shlex.quote(name)} \"$( ( {command} ) 2>&1 | tr '\\n\\t' '  ')\"\n"
        for name, (command, _) in probes.items()
    )


def test_a_job_is_refused_by_every_service_of_the_portal_and_of_slurm(make_project, alice, workdir):
    probes = dict(SERVICES)
    for name, port in IPV6_PORTS.items():
        if not listens_on_ipv6(port):
            probes[name] = (probes[name][0], NOTHING_LISTENS)
    for name, path in files_to_read().items():
        assert path.is_file(), f"{name}: no {path} to try"
        probes[name] = (f"cat {shlex.quote(str(path))}", A_FILE)
    project = make_project(members={alice: "pi"}, gpu_hours=10)
    job = job_create(user=alice, request=request_for(project, workdir, script=probe_script(probes)))
    job_submit(job_id=job.pk)
    job = run_to_the_end(job)
    assert job.state == JobState.COMPLETED
    output = job_output(job).text
    answers = dict(line.split("\t", 1) for line in output.splitlines() if "\t" in line)
    assert set(answers) == set(probes), output
    not_refused = {
        name: answer
        for name, answer in answers.items()
        if not re.search(probes[name][1], answer.strip())
    }
    assert not_refused == {}, f"a job as alice got in, or a probe broke: {not_refused}"
