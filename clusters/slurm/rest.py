"""The ``rest`` backend: slurmrestd with JSON Web Tokens the portal mints itself.

Every request names its acting user in ``X-SLURM-USER-NAME`` with a short-lived
HS256 token for that user: the job's owner for submit, cancel, hold and release,
the configured Slurm administrator for everything else. The worker needs no
Slurm libraries, only the cluster's JWT key.

It speaks Slurm 22.05 (OpenAPI ``v0.0.37``/``v0.0.38``, and the ``slurmdb`` paths of
the ``dbv0.0.3x`` plugins, which 22.05 serves under ``/slurmdb/v0.0.3x/``) and Slurm
24.11's data parsers ``v0.0.40``-``v0.0.42`` (``v0.0.42`` is 26.05's too), choosing
the newest both sides know for ``slurm`` and ``slurmdb`` apart, unless the cluster names
one. The parsers are pure functions of slurmrestd's JSON, in ``rest_parsing``, tested on
recorded answers of both.

What v0.0.40+ let the adapter do that 22.05's REST could not, so the reconciler needs
no cli backend there: change an account's own limits (``GrpTRESMins``, MaxSubmitJobs,
GrpSubmitJobs, GrpJobs: the association read, changed and POSTed back whole, then read
back), create an account under its parent in one call (``accounts_association``), read
an account's raw usage (``/shares``, sshare's GrpTRESRaw), look a token up in the
owner's own accounting (``users``), and ping with a call that proves the token
(``/diag``). What it still cannot: estimate a start (no will-run call, see
``estimate_start``) and say which partition is the default (24.11's partitions carry no
flags).
"""

import contextlib
import datetime as dt
import json
import math
import time
from collections.abc import Iterator, Mapping

import httpx

from clusters.slurm.errors import NotFound, SlurmError, SlurmRejected, SlurmUnavailable
from clusters.slurm.jwt import mint_token
from clusters.slurm.rest_parsing import (
    NOTHING_FOUND,
    SUPPORTED_VERSIONS,
    Json,
    cancel_message,
    cancel_outcome,
    cpu_minutes_limit,
    error_codes,
    error_for,
    error_list,
    gpu_minutes_limit,
    job_count_limits,
    limits_hold,
    max_submit_jobs,
    minutes_used,
    newest_versions,
    parse_account_list,
    parse_accounting,
    parse_nodes,
    parse_partitions,
    parse_queue,
    parse_queue_exit_codes,
    reshaped,
    submit_body,
    submitted_job_id,
    with_limits,
)
from clusters.slurm.states import UNSTARTED_END_STATES, SlurmJobState, normalise_state
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
    SlurmAccount,
    StartEstimate,
    SubmitRequest,
    ids_with_comment,
    queue_checked,
    with_unstarted_ends,
)

# Added to the accounting window: it is counted on slurmrestd's clock, not ours.
_WINDOW_SLACK_S = 10
# Taken off our clock before it becomes the next ?update_time=, against a
# controller whose clock is slightly behind ours.
_QUEUE_CLOCK_SLACK_S = 2


# Query parameters; a list repeats the name (24.11 reads no comma-separated states).
Params = dict[str, str | list[str]]
# 24.11's accounting, read for a window, gives a running job "now" as its end
# without the first; without the second it gives a requeued job's last run only (22.05
# always gives every run), and every run is charged.
_EVERY_RUN_WHOLE = {"disable_truncate_usage_time": "true", "show_duplicates": "true"}
_ALREADY_DONE = 2021  # ESLURM_ALREADY_DONE
_INVALID_JOB_ID = 2017


def _cannot_change_account_limits(account: str, shown: str) -> SlurmRejected:
    """Slurm 22.05's REST API (v0.0.37/v0.0.38) cannot change an account's own
    association: it answers a POST of one with success, applies nothing (it takes it for
    a move to the same parent) and, sent often, leaves user associations without their
    account in slurmdbd, which then crashes on every association list. So it is never
    sent; the cli backend (sacctmgr) sets these limits."""
    return SlurmRejected(
        f"cannot set {shown} on account {account!r}: Slurm 22.05's REST API cannot change "
        "an account's own association; use the cli backend or sacctmgr"
    )


class RestClient:
    def __init__(
        self,
        *,
        cluster_name: str,
        base_url: str,
        jwt_key_file: str,
        admin_user: str,
        timeout_s: float,
        api_version: str | None = None,
        token_lifetime_s: int = 300,
    ) -> None:
        if timeout_s <= 0 or token_lifetime_s <= 0:
            raise ValueError("timeout_s and token_lifetime_s must be positive")
        self.cluster_name = cluster_name
        self.base_url = base_url.rstrip("/")
        self.jwt_key_file = jwt_key_file
        self.admin_user = admin_user
        self.timeout_s = timeout_s
        self.token_lifetime_s = token_lifetime_s
        # "dbv0.0.38" names the plugin; its paths are /slurmdb/v0.0.38/.
        version = api_version.removeprefix("db") if api_version else None
        self._versions: tuple[str | None, str | None] | None = (
            (version, version) if version else None
        )
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s, trust_env=False)
        self._key: bytes | None = None
        self._tokens: dict[str, tuple[str, float]] = {}
        self._queue: Listing[QueueEntry] | None = None
        self._queue_asked_at = 0
        self._failed_exits: dict[int, tuple[int, int]] = {}

    def close(self) -> None:
        self._http.close()

    # --- tokens and requests -----------------------------------------------------------

    def _token(self, user: str) -> str:
        if not user or not user.isprintable() or " " in user:
            raise SlurmRejected(f"{user!r} is not a user name Slurm can act as")
        now = time.time()
        cached = self._tokens.get(user)
        # Renew early enough that a token never expires during a request.
        margin = min(self.token_lifetime_s / 2, 30 + self.timeout_s)
        if cached and cached[1] - now > margin:
            return cached[0]
        if self._key is None:
            try:
                with open(self.jwt_key_file, "rb") as key_file:
                    key = key_file.read()
            except OSError as exc:
                raise SlurmUnavailable(
                    f"cannot read the JWT key {self.jwt_key_file}: {exc.strerror or exc}"
                ) from exc
            if not key:
                raise SlurmUnavailable(f"the JWT key {self.jwt_key_file} is empty")
            self._key = key  # Slurm signs with the file's bytes as they are
        issued_at = int(now)
        token = mint_token(
            key=self._key, user=user, issued_at=issued_at, lifetime_s=self.token_lifetime_s
        )
        self._tokens[user] = (token, issued_at + self.token_lifetime_s)
        return token

    def _send(
        self,
        method: str,
        path: str,
        *,
        user: str,
        params: Params | None = None,
        body: Json | None = None,
    ) -> tuple[int, Json | None]:
        headers = {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": self._token(user)}
        where = f"{method} {self.base_url}{path}"
        try:
            response = self._http.request(method, path, params=params, json=body, headers=headers)
        except httpx.TimeoutException as exc:
            raise SlurmUnavailable(f"no answer within {self.timeout_s:g} s to {where}") from exc
        except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as exc:
            raise SlurmUnavailable(f"cannot reach slurmrestd for {where}: {exc}") from exc
        status = response.status_code
        if status == 304:
            return status, None
        if status in (401, 403):
            raise SlurmRejected(
                f"slurmrestd refused the credentials of {user!r} (HTTP {status} "
                f"{response.text.strip()[:100]}) for {where}; is rest_auth/jwt enabled and "
                f"{self.jwt_key_file} the cluster's key?"
            )
        try:
            # slurmrestd escapes what users write but passes bytes that are not UTF-8
            # through as they are (a job name may hold any byte): they are kept as
            # surrogates (``rest_parsing._text`` cuts a name at its 64th byte and
            # replaces them, as the cli backend does) and never make the whole answer
            # unreadable.
            payload = json.loads(response.content.decode("utf-8", errors="surrogateescape"))
        except ValueError:
            payload = None
        if not isinstance(payload, dict):
            text = response.text.strip()[:200]
            if status == 404:
                raise SlurmRejected(f"slurmrestd has no {path} (HTTP 404: {text}) for {where}")
            if 400 <= status < 500:
                raise SlurmRejected(f"slurmrestd refused {where}: HTTP {status} {text}")
            raise SlurmUnavailable(f"slurmrestd gave HTTP {status} without JSON for {where}")
        return status, payload

    def _checked(self, status: int, payload: Json | None, where: str, empty_ok: bool) -> Json:
        """The answer if it carries no errors; ``empty_ok`` lets "Nothing found" be empty.

        22.05 reports some failures (a refused token in slurmdbd, an empty
        query) with HTTP 200, so the ``errors`` list decides, not the status.
        """
        if payload is None:
            raise SlurmUnavailable(f"slurmrestd answered HTTP {status} without a body for {where}")
        if error_list(payload):
            if empty_ok and error_codes(payload) == {NOTHING_FOUND}:
                return {}
            raise error_for(payload, where=where)
        if status >= 500:
            raise SlurmUnavailable(f"slurmrestd answered HTTP {status} for {where}")
        if status >= 400:
            raise SlurmRejected(f"slurmrestd refused {where} with HTTP {status}")
        return payload

    def _call(
        self,
        method: str,
        path: str,
        *,
        user: str,
        params: Params | None = None,
        body: Json | None = None,
        empty_ok: bool = False,
    ) -> Json:
        status, payload = self._send(method, path, user=user, params=params, body=body)
        return self._checked(status, payload, f"{method} {self.base_url}{path}", empty_ok)

    def _paths(self) -> tuple[str | None, str | None]:
        if self._versions is None:
            payload = self._call("GET", "/openapi/v3", user=self.admin_user)
            self._versions = newest_versions(list(payload.get("paths") or {}))
        return self._versions

    def _slurm(self, tail: str) -> str:
        return self._path("slurm", self._paths()[0], tail)

    def _db(self, tail: str) -> str:
        return self._path("slurmdb", self._paths()[1], tail)

    def _reshaped(self) -> bool:
        """Whether the slurm API spoken is v0.0.40+ (24.11's objects and calls)."""
        return reshaped(self._paths()[0])

    def _db_reshaped(self) -> bool:
        return reshaped(self._paths()[1])

    def _path(self, api: str, version: str | None, tail: str) -> str:
        if version not in SUPPORTED_VERSIONS:
            raise SlurmRejected(
                f"slurmrestd at {self.base_url} offers no {api} API this client speaks "
                f"({', '.join(SUPPORTED_VERSIONS)}); configured or found: {version or 'none'}"
            )
        return f"/{api}/{version}{tail}"

    # --- jobs --------------------------------------------------------------------------

    def ping(self) -> None:
        if self._reshaped():
            # 24.11's /ping takes any token (it answers "DOWN" for a bad one); /diag asks
            # slurmctld for its statistics as the admin user, so it proves both the token
            # (1007 if refused) and a controller that answers.
            self._call("GET", self._slurm("/diag"), user=self.admin_user)
            return
        payload = self._call("GET", self._slurm("/ping"), user=self.admin_user)
        pings = payload.get("pings") or []
        if not any(str(p.get("ping", "")).upper() == "UP" for p in pings):
            hosts = ", ".join(f"{p.get('hostname')} {p.get('ping')}" for p in pings) or "none"
            raise SlurmUnavailable(f"slurmctld is not up (pings: {hosts})")

    def submit(self, request: SubmitRequest) -> int:
        path = self._slurm("/job/submit")
        body = submit_body(request, self._paths()[0])
        status, payload = self._send("POST", path, user=request.user, body=body)
        job_id = submitted_job_id(payload)
        if job_id is None:
            self._checked(status, payload, f"POST {self.base_url}{path}", empty_ok=False)
            raise SlurmUnavailable(f"slurmrestd answered HTTP {status} without a job id ({path})")
        return job_id

    def find_by_comment(
        self, comment: str, *, user: str, account: str, since: dt.datetime
    ) -> list[int]:
        def ids(entries: list[QueueEntry] | list[AccountingEntry]) -> list[int]:
            return ids_with_comment(entries, comment=comment, user=user, account=account)

        queued = ids(self.queue())
        if queued:
            return queued
        if self._db_reshaped():
            # v0.0.40+ filter on the user (and v0.0.42 has no submit_time): the owner's
            # jobs under the account in the window, and those that ended unstarted.
            window: Params = {
                "users": user,
                "account": account,
                "start_time": self._seconds_since(since),
            }
            return ids(
                with_unstarted_ends(
                    self._accounting(window),
                    self._accounting({**window, "end_time": "now", "state": self._states()}),
                )
            )
        # The accounting API filters on neither the comment nor (before v0.0.40) the
        # user: the account's jobs submitted since ``since`` are the fewest it can send.
        window = {"account": account, "submit_time": self._seconds_since(since)}
        return ids(self._accounting(window))

    def queue(self) -> Listing[QueueEntry]:
        params: Params | None = None
        if self._queue is not None:
            params = {"update_time": str(self._queue_asked_at)}
        asked_at = int(time.time()) - _QUEUE_CLOCK_SLACK_S
        path = self._slurm("/jobs")
        status, payload = self._send("GET", path, user=self.admin_user, params=params)
        if status != 304 or self._queue is None:
            payload = self._checked(status, payload, f"GET {self.base_url}{path}", empty_ok=False)
            parsed = parse_queue(payload)
            self._queue = queue_checked(parsed, refused=parsed.refused)
            self._failed_exits = parse_queue_exit_codes(payload)
            self._queue_asked_at = asked_at
        # A copy: the caller may change it; a 304 says nothing changed since the last answer.
        return Listing(self._queue, self._queue.refused)

    @contextlib.contextmanager
    def queue_stream(self) -> Iterator[ListingStream[QueueEntry]]:
        # One JSON document, read whole before it can be parsed (and often a 304).
        listing = self.queue()
        yield ListingStream(iter(listing), listing.refused)

    def accounting_since(self, since: dt.datetime) -> Listing[AccountingEntry]:
        # start_time selects, like sacct --starttime, every job eligible, running or
        # ended in the window; the states of a job that ended without ever being
        # eligible are asked for again (22.05 heeds "state" only with an end_time, and
        # answers nothing without one).
        start = self._seconds_since(since)
        # The first read takes the steps too (usage lives there only: StepUsage); the
        # second asks for jobs that never ran, which have none.
        return with_unstarted_ends(
            self._accounting({"start_time": start}, steps=True),
            self._accounting({"start_time": start, "end_time": "now", "state": self._states()}),
        )

    def _states(self) -> str | list[str]:
        """``UNSTARTED_END_STATES`` as the accounting API takes them: 22.05 sacct's codes
        comma-separated, 24.11 full names, the parameter repeated ("CA,DL" is one
        unknown flag to it, and "CA" none)."""
        if self._db_reshaped():
            return [normalise_state(code).value for code in UNSTARTED_END_STATES]
        return ",".join(UNSTARTED_END_STATES)

    @staticmethod
    def _seconds_since(since: dt.datetime) -> str:
        # 22.05 takes no epoch here and reads a date in slurmrestd's own time
        # zone, so the time is given relative to its clock. 24.11 takes an epoch on
        # v0.0.42 only (v0.0.40/41 refuse one, 9202, unless written "uts<epoch>") and
        # "now-<N>seconds" on all three: relative it stays, and immune to clock skew.
        seconds = max(0, math.ceil((dt.datetime.now(dt.UTC) - since).total_seconds()))
        return f"now-{seconds + _WINDOW_SLACK_S}seconds"

    def _accounting(self, window: Params, *, steps: bool = False) -> Listing[AccountingEntry]:
        params = {
            **window,
            "skip_steps": "false" if steps else "true",
            "cluster": self.cluster_name,
        }
        if self._db_reshaped():
            params.update(_EVERY_RUN_WHOLE)
        payload = self._call(
            "GET", self._db("/jobs"), user=self.admin_user, params=params, empty_ok=True
        )
        entries = parse_accounting(payload)
        if any(e.state == SlurmJobState.FAILED and e.exit_code is None for e in entries):
            entries = self._with_controller_exit_codes(entries)
        return entries

    def _with_controller_exit_codes(
        self, entries: Listing[AccountingEntry]
    ) -> Listing[AccountingEntry]:
        """Fill the exit codes accounting lost from slurmctld, which keeps an
        ended job for MinJobAge (300 s by default) with its raw wait status."""
        try:
            self.queue()
        except SlurmError:
            return entries  # best effort: accounting itself answered
        filled: Listing[AccountingEntry] = Listing(refused=entries.refused)
        for entry in entries:
            known = self._failed_exits.get(entry.job_id)
            if entry.exit_code is None and known is not None:
                entry = entry._replace(exit_code=known[0], signal=known[1])
            filled.append(entry)
        return filled

    def cancel(self, job_id: int, *, user: str) -> None:
        try:
            # DELETE sends SIGKILL to the whole job, as scancel does; slurmrestd
            # already counts a job that ended as success.
            answer = self._call("DELETE", self._slurm(f"/job/{job_id}"), user=user)
            # v0.0.41+ answer HTTP 200 without errors for a job slurmctld refused to
            # cancel, and say why in a per-job status (v0.0.40 says nothing at all for
            # an id below MaxJobId it does not know: that cancel looks like a success).
            refused = cancel_outcome(answer) - {_ALREADY_DONE}
            if _INVALID_JOB_ID in refused:
                raise NotFound(cancel_message(answer))
            if refused:
                raise SlurmRejected(
                    cancel_message(answer) or f"slurmctld refused to cancel {job_id}"
                )
        except NotFound:
            # slurmctld forgets a job MinJobAge after it ended and then answers
            # "Invalid job id" as for a job that never was; accounting tells them apart.
            known = self._call(
                "GET", self._db(f"/job/{job_id}"), user=self.admin_user, empty_ok=True
            )
            if not known.get("jobs"):
                raise

    def hold(self, job_id: int, *, user: str) -> None:
        # 22.05 has no hold endpoint; a job update with "hold" is scontrol hold.
        self._call("POST", self._slurm(f"/job/{job_id}"), user=user, body={"hold": True})

    def release(self, job_id: int, *, user: str) -> None:
        self._call("POST", self._slurm(f"/job/{job_id}"), user=user, body={"hold": False})

    def list_partitions(self) -> list[PartitionInfo]:
        partitions = self._call("GET", self._slurm("/partitions"), user=self.admin_user)
        nodes = self._call("GET", self._slurm("/nodes"), user=self.admin_user)
        return parse_partitions(partitions, nodes)

    def nodes(self) -> list[NodeInfo]:
        return parse_nodes(self._call("GET", self._slurm("/nodes"), user=self.admin_user))

    def devices_constrained(self) -> bool | None:
        # slurmrestd has no call that reports slurm.conf's TaskPlugin or cgroup.conf.
        return None

    def estimate_start(self, request: SubmitRequest) -> StartEstimate:
        # slurmrestd 22.05 has no will-run call: "test_only" is accepted in a
        # submission and ignored, so the job would really be queued. 24.11 (v0.0.40-42)
        # has none either: its job_desc_msg has no test_only, /job/allocate really
        # allocates, and a flag it does not know is ignored with a warning while the job
        # is queued. So the estimate stays unknown; the cli backend asks sbatch
        # --test-only.
        return StartEstimate(starts_at=None, nodes="")

    # --- accounts and limits -------------------------------------------------------------

    def _associations(self, account: str) -> list[Json]:
        payload = self._call(
            "GET",
            self._db("/associations"),
            user=self.admin_user,
            params={"account": account, "cluster": self.cluster_name},
            empty_ok=True,
        )
        return [a for a in payload.get("associations") or [] if a.get("account") == account]

    def _account_association(self, account: str) -> Json | None:
        return next(
            (
                a
                for a in self._associations(account)
                if not a.get("user") and not a.get("partition")
            ),
            None,
        )

    def _exists(self, path: str, key: str) -> bool:
        return bool(self._call("GET", path, user=self.admin_user, empty_ok=True).get(key))

    def _post_db(self, tail: str, body: Json, *, tolerated: str = "") -> None:
        path = self._db(tail)
        status, payload = self._send("POST", path, user=self.admin_user, body=body)
        if payload is not None and tolerated:
            errors = [e for e in error_list(payload) if tolerated not in str(e.get("description"))]
            payload = {**payload, "errors": errors}
        self._checked(status, payload, f"POST {self.base_url}{path}", empty_ok=False)

    def ensure_account(self, account: str, *, description: str, parent: str = "root") -> bool:
        if self._associations(account):
            return False
        if self._account_association(parent) is None:
            raise NotFound(f"Slurm has no parent account {parent!r} on {self.cluster_name}")
        if self._db_reshaped():
            # sacctmgr add account: the account (if absent) and its association under its
            # parent in one call. A POST of the association alone wants a "user", and
            # with "user": "" makes one without a parent (24.11 as 22.05), which
            # deleting the account leaves behind.
            record = {"description": description, "organization": PORTAL_ORGANIZATION}
            condition = {
                "accounts": [account],
                "clusters": [self.cluster_name],
                "association": {"parent": parent},
            }
            self._post_db(
                "/accounts_association", {"association_condition": condition, "account": record}
            )
            if self._account_association(account) is None:
                raise SlurmRejected(f"slurmrestd did not create the association of {account!r}")
            return True
        if not self._exists(self._db(f"/account/{account}"), "accounts"):
            record = {
                "name": account,
                "description": description,
                "organization": PORTAL_ORGANIZATION,
            }
            self._post_db("/accounts", {"accounts": [record]})
        # Without "user" 22.05 creates the account's association under its
        # parent but also reports "Missing required field 'user'"; with
        # "user": "" it creates one without a parent.
        association = {"account": account, "cluster": self.cluster_name, "parent_account": parent}
        self._post_db("/associations", {"associations": [association]}, tolerated="'user'")
        if self._account_association(account) is None:
            raise SlurmRejected(f"slurmrestd did not create the association of {account!r}")
        return True

    def account_organization(self, account: str) -> str:
        path = self._db(f"/account/{account}")
        accounts = self._call("GET", path, user=self.admin_user, empty_ok=True).get("accounts")
        if not accounts:
            raise NotFound(f"Slurm has no account {account!r}")
        return str(accounts[0].get("organization") or "")

    def ensure_user_association(self, *, user: str, account: str) -> bool:
        associations = self._associations(account)
        if any(a.get("user") == user for a in associations):
            return False
        if not associations:
            raise NotFound(f"Slurm has no account {account!r} on {self.cluster_name}")
        if self._db_reshaped():
            # sacctmgr add user: a new user gets this account as default, a known one keeps
            # theirs.
            condition = {
                "users": [user],
                "accounts": [account],
                "clusters": [self.cluster_name],
            }
            known = self._exists(self._db(f"/user/{user}"), "users")
            body: Json = {
                "association_condition": condition,
                "user": {} if known else {"defaultaccount": account},
            }
            self._post_db("/users_association", body)
            if not any(a.get("user") == user for a in self._associations(account)):
                raise SlurmRejected(
                    f"slurmrestd did not give {user!r} an association with {account!r}"
                )
            return True
        if not self._exists(self._db(f"/user/{user}"), "users"):
            record = {"name": user, "default": {"account": account}}
            self._post_db("/users", {"users": [record]})
        association = {"account": account, "cluster": self.cluster_name, "user": user}
        self._post_db("/associations", {"associations": [association]})
        if not any(a.get("user") == user for a in self._associations(account)):
            raise SlurmRejected(f"slurmrestd did not give {user!r} an association with {account!r}")
        return True

    def account_limits(self, account: str) -> AccountLimits:
        associations = self._associations(account)
        own = next((a for a in associations if not a.get("user") and not a.get("partition")), None)
        if own is None:
            raise NotFound(f"Slurm has no account {account!r} on {self.cluster_name}")
        return AccountLimits(
            users=tuple(sorted({a["user"] for a in associations if a.get("user")})),
            gpu_minutes=gpu_minutes_limit(own),
            cpu_minutes=cpu_minutes_limit(own),
            max_submit_jobs=max_submit_jobs(own),
            job_counts=job_count_limits(own),
            user_gpu_minutes={
                a["user"]: limit
                for a in associations
                if a.get("user")
                and not a.get("partition")
                and (limit := gpu_minutes_limit(a)) is not None
            },
            user_cpu_minutes={
                a["user"]: limit
                for a in associations
                if a.get("user")
                and not a.get("partition")
                and (limit := cpu_minutes_limit(a)) is not None
            },
        )

    def remove_user_association(self, *, user: str, account: str) -> bool:
        if user not in self.account_limits(account).users:
            return False
        if self._db_reshaped():
            self._move_default_account(user=user, leaving=account)
        self._call(
            "DELETE",
            self._db("/association"),
            user=self.admin_user,
            params={"account": account, "cluster": self.cluster_name, "user": user},
            empty_ok=True,
        )
        if user in self.account_limits(account).users:
            raise SlurmRejected(
                f"slurmrestd did not remove {user}'s association with {account}; Slurm refuses "
                "to remove a user's default account while they have others"
            )
        return True

    def _move_default_account(self, *, user: str, leaving: str) -> None:
        """v0.0.40+ refuse to remove a user's default account (7009), as sacctmgr does:
        when it is and they have another on this cluster, that one becomes the default
        first. Which is the default shows in the associations (``is_default``; the user
        record read alone says ""); the user record goes back as read, with only its
        default changed."""
        payload = self._call(
            "GET",
            self._db("/associations"),
            user=self.admin_user,
            params={"user": user, "cluster": self.cluster_name},
            empty_ok=True,
        )
        own = [a for a in payload.get("associations") or [] if a.get("user") == user]
        if not any(a.get("account") == leaving and a.get("is_default") for a in own):
            return
        others = sorted({str(a.get("account")) for a in own if a.get("account") != leaving})
        if not others:
            return  # Slurm removes the user's last association, and its default with it
        users = self._call(
            "GET", self._db(f"/user/{user}"), user=self.admin_user, empty_ok=True
        ).get("users")
        record = next((u for u in users or [] if u.get("name") == user), None)
        if record is None:
            return
        record = {**record, "default": {**(record.get("default") or {}), "account": others[0]}}
        self._post_db("/users", {"users": [record]})

    def _account_association_of(self, account: str) -> Json:
        association = self._account_association(account)
        if association is None:
            raise NotFound(f"Slurm has no account {account!r} on {self.cluster_name}")
        return association

    def _change_account_association(
        self,
        account: str,
        *,
        minutes: dict[str, int | None] | None = None,
        jobs: dict[str, int | None] | None = None,
        shown: str,
    ) -> None:
        """v0.0.40+: the account's own association POSTed back whole with these limits
        changed (see ``with_limits``), then read back: SlurmRejected if they did not take.
        24.11 applies such a POST as sacctmgr modify does and keeps the tree (its parent,
        the users' associations) as it was; the reconciler holds the association lock."""
        association = self._account_association_of(account)
        if limits_hold(association, minutes=minutes, jobs=jobs):
            return
        changed = with_limits(association, minutes=minutes, jobs=jobs)
        self._post_db("/associations", {"associations": [changed]})
        if not limits_hold(self._account_association_of(account), minutes=minutes, jobs=jobs):
            raise SlurmRejected(
                f"slurmrestd accepted {shown} for account {account!r} but did not apply it"
            )

    def set_account_limits(
        self,
        account: str,
        *,
        minutes: Mapping[str, int | None] | None = None,
        jobs: Mapping[str, int | None] | None = None,
    ) -> None:
        minutes = {name: None if v is None else int(v) for name, v in (minutes or {}).items()}
        jobs = {name: None if v is None else int(v) for name, v in (jobs or {}).items()}
        if not (minutes or jobs):
            return
        shown = " ".join(
            [f"GrpTRESMins={name}={-1 if v is None else v}" for name, v in minutes.items()]
            + [f"{name}={-1 if v is None else v}" for name, v in jobs.items()]
        )
        if self._db_reshaped():
            self._change_account_association(account, minutes=minutes, jobs=jobs, shown=shown)
            return
        # v0.0.37/38 cannot change an association's limits: fine only when they hold.
        if not limits_hold(self._account_association_of(account), minutes=minutes, jobs=jobs):
            raise _cannot_change_account_limits(account, shown)

    def set_user_limits(
        self, *, user: str, account: str, minutes: Mapping[str, int | None]
    ) -> None:
        minutes = {name: None if v is None else int(v) for name, v in minutes.items()}
        if not minutes:
            return
        shown = "GrpTRESMins=" + ",".join(
            f"{name}={-1 if v is None else v}" for name, v in minutes.items()
        )

        def association() -> Json:
            found = next(
                (
                    a
                    for a in self._associations(account)
                    if a.get("user") == user and not a.get("partition")
                ),
                None,
            )
            if found is None:
                raise NotFound(f"{user} has no association with {account!r} on {self.cluster_name}")
            return found

        current = association()
        if limits_hold(current, minutes=minutes):
            return
        if not self._db_reshaped():
            # 22.05: as for the account's own association (see _cannot_change_account_limits).
            raise SlurmRejected(
                f"cannot set {shown} for {user} under {account!r}: Slurm 22.05's REST API "
                "cannot change an association's limits; use the cli backend or sacctmgr"
            )
        # v0.0.40+: the user's association POSTed back whole with the limit changed, then
        # read back, as the account's own (_change_account_association).
        self._post_db("/associations", {"associations": [with_limits(current, minutes=minutes)]})
        if not limits_hold(association(), minutes=minutes):
            raise SlurmRejected(
                f"slurmrestd accepted {shown} for {user} under {account!r} but did not apply it"
            )

    def minutes_used(self, account: str) -> MinutesUsed:
        self._account_association_of(account)
        if self._reshaped():
            # slurmctld's usage, as sshare reads it (24.11 ignores the ``accounts``
            # filter and sends every association: the account's own is picked out).
            payload = self._call(
                "GET", self._slurm("/shares"), user=self.admin_user, params={"accounts": account}
            )
            used = minutes_used(payload, account)
            if used is None:
                raise NotFound(f"slurmctld has no usage of account {account!r} (yet)")
            return used
        raise SlurmRejected(
            "slurmrestd 22.05 does not expose an association's TRES usage (sshare's "
            "GrpTRESRaw): its associations carry no usage and it has no shares endpoint; "
            "use the cli backend"
        )

    # --- the import's listing (end of class: kept apart for the v0.0.40+ rewrite) -----

    def list_accounts(self) -> list[SlurmAccount]:
        associations = self._call(
            "GET",
            self._db("/associations"),
            user=self.admin_user,
            params={"cluster": self.cluster_name},
            empty_ok=True,
        )
        accounts = self._call("GET", self._db("/accounts"), user=self.admin_user, empty_ok=True)
        return parse_account_list(accounts, associations, cluster=self.cluster_name)
