"""The cli adapter reads squeue's output as squeue prints it (``queue_stream``): what it
printed is parsed at once, a failure after it still raises, and a squeue that stops
answering or is no longer wanted is stopped.

squeue here is a stand-in that prints recorded records in pieces and then fails or
hangs as a real one can (a controller gone mid-answer, a stuck RPC): the real tools
are in the contract suite (tests/clusters/contract.py)."""

import os
import shlex
import time
from pathlib import Path

import pytest

from clusters.slurm.cli import CliClient
from clusters.slurm.errors import SlurmRejected, SlurmUnavailable
from clusters.slurm.parsing import squeue_record


def record(job_id: int, state: str = "PENDING", *, name: str | None = None) -> bytes:
    """A record of the sync's listing (the fields no user writes), or with a ``name`` one
    of ``queue()``'s (the comment and the name first)."""
    fields = [str(job_id), "N/A", "N/A", "alice", "vision", "gpu", state, "Priority",
              "2026-12-02T12:46:10", "N/A", "1:00:00", "7", "gres/gpu:2", "1", ""]  # fmt: skip
    if name is None:
        return squeue_record(fields, texts=False)
    return squeue_record(fields, name=name.encode())


def stand_in_squeue(folder: Path, *pieces: bytes, then: str = "exit 0") -> Path:
    """An ``squeue`` in ``folder`` that prints ``pieces`` a tenth of a second apart (each
    reaches the reader on its own), then runs the shell line ``then``; it writes its pid
    to ``folder/pid`` first."""
    lines = ["#!/bin/sh", f"echo $$ > {shlex.quote(str(folder / 'pid'))}"]
    for number, piece in enumerate(pieces):
        (folder / f"piece{number}").write_bytes(piece)
        lines += [f"cat {shlex.quote(str(folder / f'piece{number}'))}", "sleep 0.1"]
    script = folder / "squeue"
    script.write_text("\n".join([*lines, then, ""]))
    script.chmod(0o755)
    return folder


def cli(bin_dir: Path, timeout_s: float = 10) -> CliClient:
    return CliClient(
        cluster_name="b", run_as_prefix="runuser -u {user} --", timeout_s=timeout_s,
        bin_dir=str(bin_dir),
    )  # fmt: skip


def read(client: CliClient) -> tuple[list, Exception | None]:
    """The entries read before the stream ended, and what it raised at its end."""
    entries = []
    with client.queue_stream() as stream:
        try:
            for entry in stream:
                entries.append(entry)
        except (SlurmRejected, SlurmUnavailable) as error:
            return entries, error
    return entries, None


def alive(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text()), 0)
    except ProcessLookupError:
        return False
    return True


def test_a_record_split_between_two_reads_is_read_whole(tmp_path):
    first, second = record(1), record(2)
    bin_dir = stand_in_squeue(tmp_path, first[:5], first[5:] + second[:9], second[9:])
    entries, error = read(cli(bin_dir))
    assert error is None
    assert [(entry.job_id, entry.state) for entry in entries] == [(1, "PENDING"), (2, "PENDING")]
    # The sync's listing carries no user's text.
    assert {(entry.name, entry.comment) for entry in entries} == {("", "")}


def test_a_text_split_between_two_reads_is_read_whole(tmp_path):
    first, second = record(1, name="täglich"), record(2, name="train")
    cut = first.index("ä".encode()) + 1  # inside the name's two-byte character
    bin_dir = stand_in_squeue(tmp_path, first[:cut], first[cut:] + second[:9], second[9:])
    listing = cli(bin_dir).queue()
    assert [(entry.job_id, entry.name) for entry in listing] == [(1, "täglich"), (2, "train")]
    assert listing.refused == []


def test_a_squeue_that_fails_part_way_raises_after_what_it_printed(tmp_path):
    bin_dir = stand_in_squeue(
        tmp_path, record(1), record(2),
        then="echo 'squeue: error: Unable to contact slurm controller (connect failure)' >&2; "
        "exit 1",
    )  # fmt: skip
    entries, error = read(cli(bin_dir))
    assert [entry.job_id for entry in entries] == [1, 2]
    assert isinstance(error, SlurmUnavailable)
    assert "Unable to contact slurm controller" in str(error)
    with pytest.raises(SlurmUnavailable):
        cli(bin_dir).queue()


def test_a_refusal_after_part_of_the_listing_is_slurms_message(tmp_path):
    bin_dir = stand_in_squeue(
        tmp_path, record(1), then="echo 'squeue: error: Invalid user: x' >&2; exit 1"
    )
    entries, error = read(cli(bin_dir))
    assert [entry.job_id for entry in entries] == [1]
    assert isinstance(error, SlurmRejected)
    assert error.message == "squeue: error: Invalid user: x"


def test_a_failure_without_a_word_says_its_status(tmp_path):
    _, error = read(cli(stand_in_squeue(tmp_path, record(1), then="exit 3")))
    assert isinstance(error, SlurmRejected)
    assert error.message == "squeue exited with status 3"


def test_a_squeue_that_stops_answering_is_stopped_at_the_deadline(tmp_path):
    bin_dir = stand_in_squeue(tmp_path, record(1), then="exec sleep 30")
    started = time.monotonic()
    entries, error = read(cli(bin_dir, timeout_s=1))
    assert [entry.job_id for entry in entries] == [1]
    assert isinstance(error, SlurmUnavailable)
    assert "squeue gave no answer within 1 s" in str(error)
    assert time.monotonic() - started < 10
    assert not alive(tmp_path / "pid")


def test_leaving_the_listing_early_stops_squeue(tmp_path):
    bin_dir = stand_in_squeue(tmp_path, record(1), then="exec sleep 30")
    started = time.monotonic()
    with cli(bin_dir).queue_stream() as stream:
        assert next(stream).job_id == 1
    assert time.monotonic() - started < 10
    assert not alive(tmp_path / "pid")


def test_a_missing_squeue_is_slurm_unavailable(tmp_path):
    with pytest.raises(SlurmUnavailable, match="not installed"), cli(tmp_path).queue_stream():
        pass
