"""The restore drill (docs/RELIABILITY.md, "Backup, restore and upgrade"): the portal's
database is restored from a dump taken before later events, while Slurm went on.

Before the dump a job ran and was charged, two were in Slurm and one was saved but not
yet taken by a worker. After it, that one was submitted, one ended and one was cancelled
(both charged), a new portal job ran and was charged, a plain ``sbatch`` ran under the
project's account, and a manager added hours (the reconciler raised Slurm's limit).
Then the dump is restored with ``pg_restore --clean`` into the same database, as an
operator would after losing it, and a worker with beat is started again.

What must follow: the accounting watermark went back with the dump, so the ingest reads
again what Slurm did since; every Slurm job of the project is charged exactly once (the
same GPU-seconds as before the restore, for those that had been charged); the job saved
before the dump is found in Slurm by its token, not submitted twice; the portal job saved
after the dump, which the database no longer has, is charged as work outside the portal
on its owner's name and listed by ``check_invariants`` (``unknown-token``); the manager's
change is gone and the reconciler puts Slurm's limit back in line with the books; the
balance is what was granted less what was charged and what is held; ``check_invariants`` is clean.
"""

import io
import os
import subprocess

import pytest
from django.core.management import call_command
from django.db import connection, connections

from accounts.ledger import allocation_adjust
from accounts.models import Allocation, LedgerEntry
from accounts.reconcile import reconcile
from accounts.selectors import project_balance
from clusters.slurm import client_for
from jobs.models import AccountingRecord, ClusterSync, Job
from jobs.services import job_cancel, job_create
from jobs.states import IN_SLURM, JobState
from jobs.submission import job_submit
from tests.conftest import running_worker
from tests.factories import run_to_the_end, slurm_ids_of, wait_for
from tests.faults.support import quick_job, settle, submitted
from tests.jobs.test_forged_tokens import nobody_takes_submissions
from tests.jobs.test_outside_portal import plain_sbatch

# Its worker is its own and its database the test's: it runs beside the other tests.
pytestmark = [
    pytest.mark.fault(own_processes=True),
    pytest.mark.slurm,
    pytest.mark.django_db(transaction=True),
]

AFTER_THE_RESTORE = {
    # Accounting is read from the watermark the dump had, and from no earlier: what
    # Slurm did after the dump is read again because the mark went back with the
    # database, not because of the few minutes' overlap every read has.
    "PORTAL_ACCOUNTING_OVERLAP_S": "0",
}
HOUR_S = 3600


def postgres_tool(*command: str) -> None:
    """pg_dump or pg_restore on the test's database, as the portal's role."""
    db = connection.settings_dict
    env = {
        **os.environ,
        "PGHOST": db["HOST"],
        "PGPORT": str(db["PORT"]),
        "PGUSER": db["USER"],
        "PGPASSWORD": db["PASSWORD"],
        "PGDATABASE": db["NAME"],
    }
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{command[0]}: {done.stderr}"


def charges_of(allocation: Allocation) -> dict[str, int]:
    return dict(
        LedgerEntry.objects.filter(allocation=allocation, kind="charge").values_list(
            "reference", "gpu_seconds"
        )
    )


def test_a_dump_restored_after_slurm_went_on_converges_charging_nothing_twice(
    make_project, dev_cluster, alice, manny, workdir, tmp_path
):
    project = make_project(members={alice: "pi"}, gpu_hours=100)
    account = project.slurm_account
    allocation = Allocation.objects.get(project=project)
    dump = tmp_path / "portal.dump"
    # Before the dump; the session's worker submits, the test does what beat does.
    with nobody_takes_submissions():
        unsubmitted = job_create(
            user=alice, request=quick_job(project, workdir, 3, script="sleep 300\n")
        )
    finished = job_create(user=alice, request=quick_job(project, workdir, 0))
    run_to_the_end(finished)
    # In Slurm at the dump; that they end is seen after it.
    ending = job_create(user=alice, request=quick_job(project, workdir, 1))
    cancelled = job_create(user=alice, request=quick_job(project, workdir, 2, script="sleep 300\n"))
    wait_for(lambda: submitted([ending.pk, cancelled.pk]) == 2, what="two jobs in Slurm")
    watermark = ClusterSync.objects.get(cluster=dev_cluster).accounting_until
    postgres_tool("pg_dump", "--format=custom", f"--file={dump}")

    # After the dump.
    job_submit(job_id=unsubmitted.pk)  # a worker takes it
    unsubmitted.refresh_from_db()
    job_cancel(user=alice, job=cancelled)
    after_dump = job_create(user=alice, request=quick_job(project, workdir, 4))
    outside = plain_sbatch(account, "true")
    allocation_adjust(allocation=allocation, gpu_seconds=50 * HOUR_S, actor=manny, reason="+50")
    assert not reconcile(cluster=dev_cluster).errors
    for job in (ending, cancelled, after_dump):
        run_to_the_end(job)
    wait_for(
        lambda: AccountingRecord.objects.filter(
            slurm_job_id=outside, charged_gpu_seconds__isnull=False
        ).exists(),
        what="the plain sbatch job to be charged",
    )
    after_dump.refresh_from_db()
    charged_before_restore = charges_of(allocation)
    ends_after_dump = list(
        AccountingRecord.objects.filter(
            slurm_job_id__in=[ending.slurm_job_id, after_dump.slurm_job_id, outside]
        ).values_list("ended_at", flat=True)
    )
    assert len(charged_before_restore) == 5  # all but the job still running
    assert len(ends_after_dump) == 3

    connections.close_all()
    postgres_tool("pg_restore", "--clean", "--if-exists", "--single-transaction",
                  "--exit-on-error", f"--dbname={connection.settings_dict['NAME']}",
                  str(dump))  # fmt: skip

    # The database is as it was at the dump.
    assert Job.objects.get(pk=unsubmitted.pk).state == JobState.NEW
    assert Job.objects.get(pk=ending.pk).state in IN_SLURM, "it was in Slurm at the dump"
    assert Job.objects.get(pk=cancelled.pk).state in IN_SLURM
    assert not Job.objects.filter(pk=after_dump.pk).exists()
    assert Allocation.objects.get(pk=allocation.pk).granted_gpu_seconds == 100 * HOUR_S
    restored_mark = ClusterSync.objects.get(cluster=dev_cluster).accounting_until
    assert restored_mark == watermark
    # Slurm's times are whole seconds: a job may end in the second of the mark.
    assert all(restored_mark <= end for end in ends_after_dump), "it must read them again"

    # Beat and a worker, started again, bring the books up to what Slurm did.
    with running_worker(beat=True, **AFTER_THE_RESTORE):
        wait_for(
            lambda: Job.objects.filter(pk=unsubmitted.pk, slurm_job_id__isnull=False).exists(),
            what="the sweeper to take the job saved before the dump",
        )
        job_cancel(user=alice, job=Job.objects.get(pk=unsubmitted.pk))
        settle([finished.pk, ending.pk, cancelled.pk, unsubmitted.pk])
        wait_for(
            lambda: (
                AccountingRecord.objects.filter(
                    slurm_job_id__in=[after_dump.slurm_job_id, outside],
                    charged_gpu_seconds__isnull=False,
                ).count()
                == 2
            ),
            what="the work Slurm did after the dump to be charged",
        )
    report = reconcile(cluster=dev_cluster)  # as `manage.py reconcile_slurm` would
    invariants = io.StringIO()
    call_command("check_invariants", f"--cluster={dev_cluster.name}", stdout=invariants)

    # Submitted once: the sweeper's attempt found the job that a worker had queued.
    restored = Job.objects.get(pk=unsubmitted.pk)
    assert restored.slurm_job_id == unsubmitted.slurm_job_id
    assert slurm_ids_of(restored) == [unsubmitted.slurm_job_id]

    # Every Slurm job of the account is charged once, each as it was before the restore.
    in_slurm = {
        entry.job_id
        for entry in client_for(dev_cluster).accounting_since(allocation.created_at)
        if entry.account == account
    }
    assert len(in_slurm) == 6
    charges = charges_of(allocation)
    # One run each: a charge's reference is the cluster, the Slurm id and the run's submit time.
    assert {reference.partition("@")[0] for reference in charges} == {
        f"{dev_cluster.name}:{slurm_id}" for slurm_id in in_slurm
    }
    assert len(charges) == len(in_slurm)
    for reference, gpu_seconds in charged_before_restore.items():
        assert charges[reference] == gpu_seconds, reference
    mark = ClusterSync.objects.get(cluster=dev_cluster).accounting_until
    assert all(mark >= end for end in ends_after_dump)

    # The portal job saved after the dump: charged on alice's name as work outside the
    # portal, and listed.
    record = AccountingRecord.objects.get(cluster=dev_cluster, slurm_job_id=after_dump.slurm_job_id)
    assert record.job is None and record.user == "alice" and record.comment == after_dump.comment
    charge = LedgerEntry.objects.get(
        reference__startswith=f"{dev_cluster.name}:{after_dump.slurm_job_id}@"
    )
    assert charge.user == alice
    listed = [line for line in invariants.getvalue().splitlines() if account in line]
    assert listed == [
        f"warning: unknown-token: Slurm job {after_dump.slurm_job_id} of alice under {account} "
        f"carries token {after_dump.submit_token} of no job (made up, or of a job saved "
        "after the point the database was restored to); charged as work outside the portal"
    ]
    assert invariants.getvalue().endswith("No invariant violations.\n")

    # The manager's +50 h went with the restore; the reconciler took Slurm's limit back.
    assert any(a.account == account and a.kind == "set limit" for a in report.actions)
    assert not [a for a in reconcile(cluster=dev_cluster, dry_run=True).actions
                if a.account == account]  # fmt: skip
    balance = project_balance(project)
    used = -sum(charges.values())
    assert (balance.granted_gpu_seconds, balance.used_gpu_seconds) == (100 * HOUR_S, used)
    assert balance.held_gpu_seconds == 0
    assert balance.available_gpu_seconds == 100 * HOUR_S - used
