"""sgp logs: a job's output, once or followed as it grows."""

import argparse
import sys
import time
from typing import Any

from client.api import Api, ApiError
from client.exits import Exit
from client.formatting import as_json
from client.jobs import TERMINAL_STATES, ended, note_state
from client.session import Session, UsageError, err, out

# While following, each poll asks only for the output's last lines; when more
# than those is new, it asks again for the whole end.
FOLLOW_TAIL_LINES = 200


def unseen_text(text: str, size_bytes: int, shown_bytes: int) -> tuple[str, bool]:
    """What of a file's end is new, when ``shown_bytes`` of it were printed before.

    ``text`` is the file's last bytes as the API decoded them, ``size_bytes`` the
    whole file's size. The second value is False when more was written than the
    answer holds (some output is skipped). Exact for UTF-8 output; a byte that is
    not UTF-8 counts as the three of its replacement character.
    """
    if size_bytes < shown_bytes:  # cut short or rewritten: it is all new
        return text, True
    data = text.encode()
    unseen = size_bytes - shown_bytes
    if unseen > len(data):
        return text, False
    return data[len(data) - unseen :].decode("utf-8", errors="replace"), True


def _output(
    api: Api, job_id: int, stream: str, tail: int | None, task: int | None = None
) -> dict[str, Any]:
    params: dict[str, Any] = {"stream": stream}
    if tail is not None:
        params["tail"] = tail
    if task is not None:
        params["array_task"] = task
    return api.get(f"jobs/{job_id}/output/", params)


def follow(
    api: Api,
    job_id: int,
    *,
    stream: str,
    tail: int | None,
    interval_s: float,
    task: int | None = None,
) -> int:
    """Print the output as it grows until the job has ended and all of it is printed."""
    shown: int | None = None  # bytes of the file printed so far
    state = None
    while True:
        # The state first, the output after: once the job is seen ended, the output
        # read next is complete (Slurm closes the files before the job ends).
        job = api.get(f"jobs/{job_id}/")
        state = note_state(job, state)
        finished = job["state"] in TERMINAL_STATES
        try:
            if shown is None:
                output = _output(api, job_id, stream, tail, task)
                new, complete = output["text"], not (output["truncated"] and tail is None)
            else:
                output = _output(api, job_id, stream, FOLLOW_TAIL_LINES, task)
                new, complete = unseen_text(output["text"], output["size_bytes"], shown)
                if not complete and output["truncated"]:
                    output = _output(api, job_id, stream, None, task)
                    new, complete = unseen_text(output["text"], output["size_bytes"], shown)
            if not complete:
                err(f"[… earlier output skipped; the portal shows the last {len(new)} characters]")
            sys.stdout.write(new)
            sys.stdout.flush()
            shown = output["size_bytes"]
        except ApiError as error:
            if error.code != "output_unavailable":
                raise
            if finished and shown is None:
                err(f"sgp: {error.message}")  # it never wrote any: cancelled early, refused
        if finished:
            return ended(job)
        time.sleep(interval_s)


def cmd_logs(args: argparse.Namespace, session: Session) -> int:
    stream = "stderr" if args.stderr else "stdout"
    if args.follow:
        if args.json:
            raise UsageError("--follow prints the text as it comes; it has no --json")
        return follow(
            session.api,
            args.id,
            stream=stream,
            tail=args.tail,
            interval_s=args.interval,
            task=args.array_task,
        )
    output = _output(session.api, args.id, stream, args.tail, args.array_task)
    if args.json:
        out(as_json(output))
        return Exit.OK
    sys.stdout.write(output["text"])
    if output["truncated"] and args.tail is None:
        err(f"[the output is {output['size_bytes']:,} bytes; this is its end]")
    return Exit.OK
