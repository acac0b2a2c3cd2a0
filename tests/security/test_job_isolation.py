"""Code inside a job reaches neither the portal's services nor Slurm's.

A real job, submitted as alice through the portal, tries what any researcher's code
could try on the node it runs on: PostgreSQL as ``postgres`` and as the portal's own
role (TCP and the Unix socket), Redis, MariaDB (which holds Slurm's accounting and
association limits) as root and as slurmdbd's user with the password the repository
once shipped, and the files that hold the stack's secrets and the cluster's JWT key.
Each is refused. On the dev stack the job runs on the same host as the services, so
this is the harshest place to try.
"""

import pytest

from jobs.selectors import job_output
from jobs.services import job_create
from jobs.states import JobState
from jobs.submission import job_submit
from tests.conftest import stack_value
from tests.factories import request_for, run_to_the_end

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]

# Each line: a name and a command that succeeds only if the job got in.
PROBES = {
    "postgres over TCP": "psql -w -h 127.0.0.1 -U postgres -d postgres -c 'SELECT 1'",
    "postgres over TCP (IPv6)": "psql -w -h ::1 -U postgres -d postgres -c 'SELECT 1'",
    "postgres over the socket": "psql -w -U postgres -d postgres -c 'SELECT 1'",
    "portal role over TCP": "psql -w -h 127.0.0.1 -U portal -d portal -c 'SELECT 1'",
    "portal role over the socket": "psql -w -U portal -d portal -c 'SELECT 1'",
    "redis": '[ "$(redis-cli -h 127.0.0.1 ping 2>&1)" = PONG ]',
    "redis (IPv6)": '[ "$(redis-cli -h ::1 ping 2>&1)" = PONG ]',
    "redis, a key": "redis-cli -h 127.0.0.1 -n 1 set probe 1 | grep -qx OK",
    "mariadb root over the socket": "mysql -uroot -e 'SELECT 1'",
    "mariadb root over TCP": "mysql -h127.0.0.1 -uroot -e 'SELECT 1'",
    "mariadb anonymous": "mysql -e 'SELECT 1'",
    "mariadb slurm, the old dev password": "mysql -uslurm -pslurm-dev-only -e 'SELECT 1'",
    "the stack secrets": "cat {secrets}/*",
    "the cluster JWT key": "cat {jwt_key}",
    "slurmdbd.conf": "cat /etc/slurm/slurmdbd.conf",
}


def probe_script(secrets: str, jwt_key: str) -> str:
    lines = []
    for name, command in PROBES.items():
        command = command.format(secrets=secrets, jwt_key=jwt_key)
        lines.append(
            f"if ( {command} ) >/dev/null 2>&1; then echo 'OPEN: {name}'; "
            f"else echo 'refused: {name}'; fi"
        )
    return "\n".join(lines) + "\n"


def test_a_job_is_refused_by_every_service_of_the_portal_and_of_slurm(make_project, alice, workdir):
    stack_dir = stack_value("PORTAL_STACK_DIR")
    script = probe_script(f"{stack_dir}/secrets", stack_value("SLURM_JWT_KEY_FILE"))
    project = make_project(members={alice: "pi"}, gpu_hours=10)
    job = job_create(user=alice, request=request_for(project, workdir, script=script))
    job_submit(job_id=job.pk)
    job = run_to_the_end(job)
    assert job.state == JobState.COMPLETED
    output = job_output(job).text
    results = dict(line.split(": ", 1)[::-1] for line in output.splitlines() if ": " in line)
    assert set(results) == set(PROBES), output
    opened = sorted(name for name, verdict in results.items() if verdict != "refused")
    assert opened == [], f"a job as alice got into: {opened}"
