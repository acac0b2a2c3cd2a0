"""sgp logs: the output's end, or with --follow every new piece of it once, until the job
has ended; the exit code tells whether it completed."""

import httpx
import pytest

from client.logs import unseen_text
from tests.client.conftest import error, job_json


def output(text: str, size: int | None = None, truncated: bool = False) -> httpx.Response:
    size = len(text.encode()) if size is None else size
    return httpx.Response(200, json={"text": text, "size_bytes": size, "truncated": truncated})


def job(state: str, **fields) -> httpx.Response:
    return httpx.Response(200, json=job_json(state=state, **fields))


def test_logs_prints_the_output_and_asks_for_the_stream_and_tail(sgp, portal):
    portal.on("GET", "jobs/12/output/", output("two\nthree\n", size=100, truncated=True))
    result = sgp("logs", "12", "--stderr", "--tail", "2", "--array-task", "3", portal=portal)
    assert result.code == 0
    assert result.out == "two\nthree\n"
    assert dict(portal.requests[0].url.params) == {
        "stream": "stderr",
        "tail": "2",
        "array_task": "3",
    }


def test_logs_says_when_it_shows_only_the_end(sgp, portal):
    portal.on("GET", "jobs/12/output/", output("end\n", size=2_000_000, truncated=True))
    assert "2,000,000 bytes" in sgp("logs", "12", portal=portal).err


def test_logs_json_is_the_apis(sgp, portal):
    portal.on("GET", "jobs/12/output/", output("hi\n"))
    assert sgp("logs", "12", "--json", portal=portal).json() == {
        "text": "hi\n",
        "size_bytes": 3,
        "truncated": False,
    }


def test_output_not_written_yet_exits_4(sgp, portal):
    portal.on(
        "GET",
        "jobs/12/output/",
        error(404, "output_unavailable", "The job has not reached Slurm yet, so it has no output."),
    )
    result = sgp("logs", "12", portal=portal)
    assert result.code == 4 and "not reached Slurm" in result.err


def test_follow_waits_for_output_prints_each_piece_once_and_exits_0_when_completed(sgp, portal):
    portal.on(
        "GET",
        "jobs/12/",
        job("pending"),
        job("running"),
        job("running"),
        job("running"),
        job("completed", exit_code=0),
    )
    portal.on(
        "GET",
        "jobs/12/output/",
        error(404, "output_unavailable", "The job has not written it yet."),
        output("one\n"),
        output("one\n"),  # nothing new
        output("one\ntwo\nthr"),
        output("one\ntwo\nthree\n"),
    )
    result = sgp("logs", "12", "--follow", portal=portal)
    assert result.code == 0, result.err
    assert result.out == "one\ntwo\nthree\n"
    polls = portal.sent("GET", "jobs/12/output/")
    assert len(polls) == 5
    assert "tail" not in polls[1].url.params  # the first read: all of it
    assert polls[2].url.params["tail"] == "200"  # later ones: only the end


def test_follow_exits_1_when_the_job_did_not_complete(sgp, portal):
    portal.on("GET", "jobs/12/", job("failed", exit_code=3))
    portal.on("GET", "jobs/12/output/", output("Traceback\n"))
    result = sgp("logs", "12", "--follow", portal=portal)
    assert result.code == 1
    assert result.out == "Traceback\n"
    assert "job 12 ended failed, exit code 3" in result.err


def test_follow_of_a_job_that_never_wrote_output_says_why(sgp, portal):
    portal.on("GET", "jobs/12/", job("submit_failed", submit_error="Invalid account"))
    portal.on(
        "GET",
        "jobs/12/output/",
        error(404, "output_unavailable", "The job has not reached Slurm yet, so it has no output."),
    )
    result = sgp("logs", "12", "--follow", portal=portal)
    assert result.code == 1
    assert "no output" in result.err and "Invalid account" in result.err


def test_follow_reads_the_whole_end_when_more_than_the_tail_is_new(sgp, portal):
    lines = "".join(f"line {i}\n" for i in range(500))
    portal.on("GET", "jobs/12/", job("running"), job("completed"))

    def answer(request):
        if "tail" in request.url.params:
            last = "".join(f"line {i}\n" for i in range(300, 500))
            return output(last, size=len(lines), truncated=True)
        return output(lines if len(portal.sent("GET", "jobs/12/output/")) > 1 else "line 0\n")

    portal.on("GET", "jobs/12/output/", answer)
    result = sgp("logs", "12", "--follow", portal=portal)
    assert result.code == 0
    assert result.out == lines


def test_follow_of_an_unknown_job_exits_4(sgp, portal):
    portal.on("GET", "jobs/99/", error(404, "not_found", "There is no job 99 of yours."))
    assert sgp("logs", "99", "--follow", portal=portal).code == 4


@pytest.mark.parametrize(
    ("text", "size", "shown", "new", "complete"),
    [
        ("one\ntwo\n", 8, 4, "two\n", True),
        ("one\n", 4, 4, "", True),
        ("tail\n", 1000, 10, "tail\n", False),  # more was written than the answer holds
        ("fresh\n", 6, 50, "fresh\n", True),  # the file was rewritten
        ("naïve ✓\n", 11, 4, "ve ✓\n", True),  # bytes, not characters
    ],
)
def test_unseen_text_is_what_grew_since_the_last_read(text, size, shown, new, complete):
    assert unseen_text(text, size, shown) == (new, complete)
