"""The command line: usage errors exit 2 before anything is sent; --help lists the exit codes."""

import pytest

from client.cli import build_parser


def test_help_lists_the_exit_codes(sgp):
    result = sgp("--help")
    assert result.code == 0
    for line in ["0  ok", "3  not logged in", "4  not found", "5  refused", "7  rate limited"]:
        assert line in result.out


def test_each_command_documents_the_exit_codes_too(sgp):
    assert "6  the portal or Slurm is unavailable" in sgp("logs", "--help").out


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ([], "COMMAND"),
        (["frobnicate"], "invalid choice"),
        (["submit", "--time", "1:75"], "not a time"),
        (["submit", "--env", "NOEQUALS"], "KEY=VALUE"),
        (["submit", "--gpus", "0"], "--gpus"),
        (["submit", "--depends-on", "x"], "--depends-on"),
        (["jobs", "--limit", "0"], "--limit"),
        (["logs", "12", "--tail", "-1"], "--tail"),
        (["logs", "twelve"], "id"),
        (["show", "12", "--interval", "0"], "--interval"),
    ],
)
def test_a_bad_command_line_is_a_usage_error(sgp, portal, argv, says):
    result = sgp(*argv, portal=portal)
    assert result.code == 2
    assert says in result.err
    assert portal.requests == []


def test_follow_has_no_json(sgp, portal):
    result = sgp("logs", "12", "--follow", "--json", portal=portal)
    assert result.code == 2 and "no --json" in result.err
    assert portal.requests == []


def test_flags_are_parsed_into_the_request_fields():
    args = build_parser().parse_args(
        ["submit", "--gpus", "2", "--time", "1:30", "--env", "A=1", "--env", "B=x=y",
         "--depends-on", "4", "--depends-on", "5", "--mem-per-gpu", "16", "job.yaml"]
    )  # fmt: skip
    assert (args.gpus, args.time, args.mem_per_gpu) == (2, 90, 16)
    assert args.env == [("A", "1"), ("B", "x=y")]
    assert args.depends_on == [4, 5]
    assert args.job_file == "job.yaml"
    assert args.json is False and args.idempotency_key is None
