"""The ``cli`` backend: Slurm's command-line tools, run without a shell.

Commands are argument lists and scripts go on stdin. The environment is built
from scratch, so the worker's own ``SLURM_*``/``SBATCH_*`` variables and
secrets never reach Slurm or a job. Commands about a user's jobs (sbatch,
scancel, scontrol hold/release) run as that user through the run-as prefix
(``runuser -u {user} --`` in dev, ``sudo -n -u {user}`` in production);
reading the queue and accounting and managing accounts run as the worker's
own user, which must be a Slurm operator, through the command prefix when the
cluster's tools are not the worker's own (``clusters/prefixes.py``).
"""

import contextlib
import datetime as dt
import os
import re
import select
import shlex
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from typing import IO

from clusters.prefixes import command_prefix_argv, run_as_prefix_argv, run_as_prefix_template
from clusters.slurm.errors import (
    ALREADY_ENDED_MARKERS,
    UNKNOWN_JOB_MARKERS,
    NotFound,
    SlurmRejected,
    SlurmUnavailable,
    error_from_message,
    says,
)
from clusters.slurm.parsing import (
    SACCT_FORMAT,
    SACCTMGR_ACCOUNT_FORMAT,
    SACCTMGR_ASSOCIATION_FORMAT,
    SINFO_PARTITION_FORMAT,
    SQUEUE_FORMAT,
    SQUEUE_TEXTS_FORMAT,
    SSHARE_FORMAT,
    parse_devices_constrained,
    parse_sacct_stream,
    parse_sacctmgr_accounts,
    parse_sacctmgr_associations,
    parse_scontrol_nodes,
    parse_sinfo_partitions,
    parse_squeue_stream,
    parse_sshare_account,
    parse_test_only,
    slurm_accounts,
)
from clusters.slurm.states import UNSTARTED_END_STATES
from clusters.slurm.types import (
    PORTAL_ORGANIZATION,
    AccountingEntry,
    AccountLimits,
    Listing,
    ListingStream,
    MinutesUsed,
    NodeInfo,
    PartitionInfo,
    QueueEntry,
    Refused,
    SlurmAccount,
    StartEstimate,
    SubmitRequest,
    ids_with_comment,
    queue_checked,
    with_unstarted_ends,
)


def slurm_environment() -> dict[str, str]:
    """A minimal environment for Slurm commands: nothing of the worker's leaks in.

    TZ=UTC makes Slurm print and read times in UTC.
    """
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
    }


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def export_argument(environment: Mapping[str, str]) -> str:
    """``--export`` naming exactly the given variables, never their values: a command line
    is every local user's to read (``/proc/*/cmdline``), and a job's environment is where
    its secrets go. The values travel in the script on sbatch's standard input
    (``with_exports``); srun steps inside the job take them from the script's environment
    by the same names (sbatch hands the list on as ``SLURM_EXPORT_ENV``)."""
    if not environment:
        return "--export=NONE"
    for key in environment:
        if not _NAME.fullmatch(key):
            raise ValueError(f"environment variable {key!r} cannot be passed to sbatch")
    return "--export=" + ",".join(environment)


def with_exports(script: str, environment: Mapping[str, str]) -> str:
    """The batch script with an ``export NAME='value'`` line for each variable, after its
    ``#!`` line and the comments sbatch reads ``#SBATCH`` directives from (a command
    before them would end the directives): the job's first commands."""
    body, newline, _ = script.rpartition("\n") if script.endswith("\n") else (script, "", "")
    lines = body.split("\n")
    at = 1 if lines[0].startswith("#!") else 0
    while at < len(lines) and (not lines[at].strip() or lines[at].lstrip().startswith("#")):
        at += 1
    exports = [f"export {key}={shlex.quote(value)}" for key, value in environment.items()]
    return "\n".join([*lines[:at], *exports, *lines[at:]]) + newline


def sbatch_arguments(request: SubmitRequest) -> list[str]:
    """The authoritative job description on sbatch's command line (it wins over directives)."""
    arguments = [
        f"--account={request.account}",
        f"--partition={request.partition}",
        f"--job-name={request.name}",
        f"--nodes={request.nodes}",
        f"--time={request.time_limit_minutes}",
        f"--chdir={request.working_directory}",
        f"--output={request.stdout_path}",
        f"--error={request.stderr_path}",
        export_argument(request.environment),
        "--requeue" if request.requeue else "--no-requeue",
    ]
    if request.gpus_per_node:
        arguments.append(f"--gpus-per-node={request.gpus_per_node}")
    if request.cpus_per_gpu:
        arguments.append(f"--cpus-per-gpu={request.cpus_per_gpu}")
    if request.mem_per_gpu_mb:
        arguments.append(f"--mem-per-gpu={request.mem_per_gpu_mb}M")
    if request.array:
        arguments.append(f"--array={request.array}")
    if request.after_ok:
        arguments.append("--dependency=afterok:" + ":".join(str(i) for i in request.after_ok))
    if request.comment:
        arguments.append(f"--comment={request.comment}")
    return arguments


class CliClient:
    def __init__(
        self,
        *,
        cluster_name: str,
        run_as_prefix: str,
        timeout_s: float,
        command_prefix: str = "",
        bin_dir: str = "",
    ) -> None:
        """``command_prefix`` goes before the tools the worker runs as itself,
        ``run_as_prefix`` (with ``{user}``) before those it runs as a job's owner, and
        ``bin_dir`` (empty: PATH) is where the tool is, as what the prefix runs sees it.
        A prefix that cannot be used raises ``clusters.prefixes.PrefixInvalid``."""
        self.cluster_name = cluster_name
        self.command_argv = command_prefix_argv(command_prefix)
        self.run_as_template = run_as_prefix_template(run_as_prefix)
        self.timeout_s = timeout_s
        self.bin_dir = bin_dir

    # --- running commands ------------------------------------------------------

    def command(self, argv: list[str], *, as_user: str | None = None) -> list[str]:
        """The full command line of a tool's ``argv``: the tool from ``bin_dir`` after the
        command prefix, or after the run-as prefix for ``as_user``."""
        tool = os.path.join(self.bin_dir, argv[0]) if self.bin_dir else argv[0]
        if as_user is None:
            prefix = self.command_argv
        else:
            prefix = run_as_prefix_argv(self.run_as_template, as_user)
        return [*prefix, tool, *argv[1:]]

    def _run(self, argv: list[str], *, as_user: str | None = None, stdin: str | None = None):
        command = self.command(argv, as_user=as_user)
        try:
            completed = subprocess.run(
                command,
                input=stdin,
                capture_output=True,
                env=slurm_environment(),
                timeout=self.timeout_s,
                check=False,
                text=True,
                errors="replace",
                cwd="/",  # the worker's own directory is none of a job's business
            )
        except subprocess.TimeoutExpired as exc:
            raise SlurmUnavailable(f"{argv[0]} gave no answer within {self.timeout_s:g} s") from exc
        except FileNotFoundError as exc:
            raise SlurmUnavailable(f"{command[0]} is not installed on this worker") from exc
        if completed.returncode != 0:
            message = (completed.stderr or completed.stdout).strip() or (
                f"{argv[0]} exited with status {completed.returncode}"
            )
            raise error_from_message(message)
        return completed

    @contextlib.contextmanager
    def _streamed(self, argv: list[str]) -> Iterator[Iterator[bytes]]:
        """The tool's output (run as the worker's own user) as it prints it: chunks of
        bytes, read while the tool still runs (the listings' parsers cut records by byte
        counts, so nothing is decoded here). At its end the iterator raises as ``_run``
        does when the tool failed, and at the deadline SlurmUnavailable; whatever was
        read before is then not a whole answer. Leaving the block stops the tool."""
        command = self.command(argv)
        deadline = time.monotonic() + self.timeout_s
        # A file, not a pipe: a tool that says much on stderr cannot block on it while
        # stdout is read.
        with tempfile.TemporaryFile() as stderr:
            try:
                process = subprocess.Popen(
                    command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr,
                    env=slurm_environment(), cwd="/",
                )  # fmt: skip
            except FileNotFoundError as exc:
                raise SlurmUnavailable(f"{command[0]} is not installed on this worker") from exc
            try:
                yield self._chunks(argv[0], process, stderr, deadline)
            finally:
                if process.poll() is None:
                    process.kill()
                process.wait()
                process.stdout.close()  # type: ignore[union-attr]

    def _chunks(
        self, tool: str, process: subprocess.Popen, stderr: IO[bytes], deadline: float
    ) -> Iterator[bytes]:
        timed_out = SlurmUnavailable(f"{tool} gave no answer within {self.timeout_s:g} s")
        out = process.stdout.fileno()  # type: ignore[union-attr]
        ready = select.poll()
        ready.register(out, select.POLLIN)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not ready.poll(remaining * 1000):
                process.kill()
                raise timed_out
            data = os.read(out, 1 << 16)
            if not data:
                break
            yield data
        try:
            status = process.wait(max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            process.kill()
            raise timed_out from None
        if status != 0:
            stderr.seek(0)
            message = stderr.read().decode(errors="replace").strip()
            raise error_from_message(message or f"{tool} exited with status {status}")

    # --- the protocol ------------------------------------------------------------

    def ping(self) -> None:
        try:
            result = self._run(["scontrol", "ping"])
        except SlurmRejected as exc:  # "Slurmctld(primary) at vm is DOWN" exits 1
            raise SlurmUnavailable(exc.message) from exc
        if " is UP" not in result.stdout:
            raise SlurmUnavailable(result.stdout.strip() or "slurmctld did not answer the ping")

    def submit(self, request: SubmitRequest) -> int:
        result = self._run(
            ["sbatch", "--parsable", *sbatch_arguments(request)],
            as_user=request.user,
            stdin=with_exports(request.script, request.environment),
        )
        # --parsable prints "<id>" or "<id>;<cluster>".
        return int(result.stdout.strip().split(";")[0])

    def find_by_comment(
        self, comment: str, *, user: str, account: str, since: dt.datetime
    ) -> list[int]:
        def ids(entries: list[QueueEntry] | list[AccountingEntry]) -> list[int]:
            return ids_with_comment(entries, comment=comment, user=user, account=account)

        mine = [f"--user={user}", f"--account={account}"]
        queued = ids(self._queue(*mine))
        if queued:
            return queued
        return ids(self._accounting(since, f"--user={user}", f"--accounts={account}"))

    def queue(self) -> Listing[QueueEntry]:
        return self._queue()

    def queue_stream(self) -> contextlib.AbstractContextManager[ListingStream[QueueEntry]]:
        # squeue prints its first record only once it has the whole queue from slurmctld
        # and sorted it (two thirds of its time at 10,000 jobs); from then on it formats
        # on one core while its records are parsed on the other. Without the users' texts:
        # the sync reads none, and they would make the listing half as long again.
        return self._squeue_stream(texts=False)

    def _queue(self, *selection: str) -> Listing[QueueEntry]:
        with self._squeue_stream(*selection, texts=True) as listing:
            return queue_checked(listing, refused=listing.refused)

    @contextlib.contextmanager
    def _squeue_stream(self, *selection: str, texts: bool) -> Iterator[ListingStream[QueueEntry]]:
        layout = SQUEUE_TEXTS_FORMAT if texts else SQUEUE_FORMAT
        argv = ["squeue", "--noheader", "--all", "--states=all", *selection, "-o", layout]
        with self._streamed(argv) as chunks:
            refused: list[Refused] = []
            yield ListingStream(parse_squeue_stream(chunks, refused, texts=texts), refused)

    def accounting_since(self, since: dt.datetime) -> Listing[AccountingEntry]:
        # The first read takes the steps too (usage lives there only: StepUsage); the
        # second asks for jobs that never ran, which have none.
        return with_unstarted_ends(
            self._accounting(since, "--allusers", steps=True),
            self._accounting(since, "--allusers", f"--state={','.join(UNSTARTED_END_STATES)}"),
        )

    def _accounting(
        self, since: dt.datetime, *selection: str, steps: bool = False
    ) -> Listing[AccountingEntry]:
        # sacct refuses a start after its end ("now"); Slurm's clock may be behind ours.
        since = min(since, dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1))
        start = since.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
        only_jobs = [] if steps else ["--allocations"]
        # --duplicates: every run of a requeued job (each with its own submit time), not
        # only the last; each is charged. Not --parsable: fixed widths (parsing.py).
        argv = ["sacct", *selection, *only_jobs, "--duplicates", "--noheader",
                f"--starttime={start}", "--endtime=now", f"--format={SACCT_FORMAT}"]  # fmt: skip
        with self._streamed(argv) as chunks:
            return parse_sacct_stream(chunks)

    def cancel(self, job_id: int, *, user: str) -> None:
        # scancel exits 0 for an unknown or ended job; only --verbose tells which.
        result = self._run(["scancel", "--verbose", str(job_id)], as_user=user)
        errors = [line for line in result.stderr.splitlines() if "error:" in line]
        message = "\n".join(errors)
        if says(message, UNKNOWN_JOB_MARKERS):
            raise NotFound(message)
        if errors and not says(message, ALREADY_ENDED_MARKERS):
            raise SlurmRejected(message)

    def hold(self, job_id: int, *, user: str) -> None:
        self._run(["scontrol", "hold", str(job_id)], as_user=user)

    def release(self, job_id: int, *, user: str) -> None:
        self._run(["scontrol", "release", str(job_id)], as_user=user)

    def list_partitions(self) -> list[PartitionInfo]:
        result = self._run(["sinfo", "--noheader", "--all", f"--format={SINFO_PARTITION_FORMAT}"])
        return parse_sinfo_partitions(result.stdout)

    def nodes(self) -> list[NodeInfo]:
        result = self._run(["scontrol", "--oneliner", "show", "nodes"])
        return parse_scontrol_nodes(result.stdout)

    def devices_constrained(self) -> bool | None:
        return parse_devices_constrained(self._run(["scontrol", "show", "config"]).stdout)

    def estimate_start(self, request: SubmitRequest) -> StartEstimate:
        result = self._run(
            ["sbatch", "--test-only", *sbatch_arguments(request)],
            as_user=request.user,
            stdin=request.script,
        )
        return parse_test_only(result.stderr + result.stdout)

    def _sacctmgr_lines(self, *args: str) -> list[str]:
        result = self._run(["sacctmgr", "--noheader", "--parsable2", *args])
        return [line for line in result.stdout.splitlines() if line.strip()]

    def ensure_account(self, account: str, *, description: str, parent: str = "root") -> bool:
        # One read for both: whether the account is there, and its parent.
        present = {
            line.lower()
            for line in self._sacctmgr_lines(
                "show",
                "association",
                "where",
                f"cluster={self.cluster_name}",
                f"account={account},{parent}",
                "format=Account",
            )
        }  # fmt: skip  (Slurm keeps account names in lower case)
        if account.lower() in present:
            return False
        if parent.lower() not in present:
            # sacctmgr would add the account under root and only warn.
            raise NotFound(f"Slurm has no parent account {parent!r} on {self.cluster_name}")
        self._run(
            ["sacctmgr", "--immediate", "add", "account", account, f"cluster={self.cluster_name}",
             f"parent={parent}", f"description={description}",
             f"organization={PORTAL_ORGANIZATION}"]
        )  # fmt: skip
        return True

    def account_organization(self, account: str) -> str:
        lines = self._sacctmgr_lines(
            "show", "account", "where", f"name={account}", "format=Organization"
        )
        if not lines:
            raise NotFound(f"Slurm has no account {account!r}")
        return lines[0].strip()

    def ensure_user_association(self, *, user: str, account: str) -> bool:
        # Added without a read first; only a refusal is looked into (sacctmgr refuses an
        # association that is there and one with an account that is not, in words that
        # differ between releases): there already means False, anything else is raised.
        cluster = f"cluster={self.cluster_name}"
        try:
            self._run(
                ["sacctmgr", "--immediate", "add", "user", user, f"account={account}", cluster]
            )
        except SlurmRejected:
            rows = self._sacctmgr_lines(
                "show", "association", "where", cluster, f"account={account}",
                "format=Account,User",
            )  # fmt: skip
            if f"{account.lower()}|{user}" in rows:
                return False
            if not rows:  # not even the account's own association
                raise NotFound(f"Slurm has no account {account!r} on {self.cluster_name}") from None
            raise
        return True

    def _associations(self, *where: str) -> dict[str, tuple[str, AccountLimits]]:
        result = self._run(
            ["sacctmgr", "--noheader", "--parsable2", "show", "association", "where",
             f"cluster={self.cluster_name}", *where, f"format={SACCTMGR_ASSOCIATION_FORMAT}"]
        )  # fmt: skip
        return parse_sacctmgr_associations(result.stdout)

    def account_limits(self, account: str) -> AccountLimits:
        found = self._associations(f"account={account}").get(account)
        if found is None:
            raise NotFound(f"Slurm has no account {account!r} on {self.cluster_name}")
        return found[1]

    def list_accounts(self) -> list[SlurmAccount]:
        associations = self._associations()
        accounts = self._run(
            ["sacctmgr", "--noheader", "--parsable2", "show", "account",
             f"format={SACCTMGR_ACCOUNT_FORMAT}"]
        )  # fmt: skip
        return slurm_accounts(parse_sacctmgr_accounts(accounts.stdout), associations)

    def remove_user_association(self, *, user: str, account: str) -> bool:
        cluster = f"cluster={self.cluster_name}"
        accounts = self._sacctmgr_lines(
            "show", "association", "where", cluster, f"user={user}", "format=Account"
        )
        if account not in accounts:
            return False
        default = self._sacctmgr_lines(
            "show", "user", "where", f"name={user}", "format=DefaultAccount"
        )
        others = [other for other in accounts if other != account]
        if default == [account] and others:
            self._run(
                ["sacctmgr", "--immediate", "modify", "user", "where", f"name={user}", cluster,
                 "set", f"DefaultAccount={others[0]}"]
            )  # fmt: skip
        self._run(
            ["sacctmgr", "--immediate", "delete", "user", "where", f"name={user}",
             f"account={account}", cluster]
        )  # fmt: skip
        return True

    def set_account_limits(
        self,
        account: str,
        *,
        minutes: Mapping[str, int | None] | None = None,
        jobs: Mapping[str, int | None] | None = None,
    ) -> None:
        settings = [f"{name}={_limit_value(value)}" for name, value in (jobs or {}).items()]
        if minutes:
            tres = ",".join(f"{name}={_limit_value(value)}" for name, value in minutes.items())
            settings.insert(0, f"GrpTRESMins={tres}")  # the TRES named; the others stay
        if not settings:
            return
        try:
            self._run(
                ["sacctmgr", "--immediate", "modify", "account", "where", f"name={account}",
                 f"cluster={self.cluster_name}", "set", *settings]
            )  # fmt: skip
        except SlurmRejected as exc:
            # sacctmgr exits 1 with "Nothing modified" both when the limits are already
            # set and when there is no such account: only the second is an error.
            if "nothing modified" not in exc.message.lower():
                raise
            self.account_limits(account)  # NotFound if there is no such account

    def set_user_limits(
        self, *, user: str, account: str, minutes: Mapping[str, int | None]
    ) -> None:
        if not minutes:
            return
        tres = ",".join(f"{name}={_limit_value(value)}" for name, value in minutes.items())
        try:
            self._run(
                ["sacctmgr", "--immediate", "modify", "user", "where", f"name={user}",
                 f"account={account}", f"cluster={self.cluster_name}", "set",
                 f"GrpTRESMins={tres}"]
            )  # fmt: skip
        except SlurmRejected as exc:
            # Already so, or no such association (only that is an error): 22.05 says
            # "Nothing modified", 24.11 (for a user) "Request didn't affect anything".
            message = exc.message.lower()
            if "nothing modified" not in message and "didn't affect anything" not in message:
                raise
            if user not in self.account_limits(account).users:
                raise NotFound(
                    f"{user} has no association with {account!r} on {self.cluster_name}"
                ) from None

    def minutes_used(self, account: str) -> MinutesUsed:
        result = self._run(
            ["sshare", "--noheader", "--parsable2", "--all", f"--accounts={account}",
             f"--clusters={self.cluster_name}", SSHARE_FORMAT]
        )  # fmt: skip
        used = parse_sshare_account(result.stdout, account)
        if used is None:
            raise NotFound(f"Slurm has no account {account!r} on {self.cluster_name}")
        return used


def _limit_value(value: int | None) -> str:
    """A limit as sacctmgr takes it: -1 removes it."""
    return "-1" if value is None else str(int(value))
