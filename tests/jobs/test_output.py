"""Reading job output: pattern expansion, tails, and every file the portal must not show."""

import os
from pathlib import Path

import pytest

from jobs.errors import OutputUnavailable
from jobs.output import expand_output_pattern, read_output

OWNER = os.geteuid()


@pytest.fixture
def root(tmp_path) -> Path:
    return Path(os.path.realpath(tmp_path))


def expand(path, **changes):
    values = {"job_id": 1234, "array_job_id": None, "array_task": None, "name": "train"}
    return expand_output_pattern(path, **{**values, "user": "alice", **changes})


def test_patterns_expand_as_slurm_expands_them():
    assert expand("/h/%x-%j.out") == "/h/train-1234.out"
    assert expand("/h/%u/%A_%a.out", job_id=1240, array_job_id=1234, array_task=6) == (
        "/h/alice/1234_6.out"
    )
    assert expand("/h/%A_%a.out") == "/h/1234_4294967294.out"  # not an array: Slurm's NO_VAL
    assert expand("/h/100%%-%j%%.log") == "/h/100%-1234%.log"
    assert expand("/h/%N.out", node="gpu07") == "/h/gpu07.out"


def test_the_node_name_pattern_needs_the_node():
    with pytest.raises(OutputUnavailable, match="%N"):
        expand("/h/%N.out")


def test_it_reads_the_whole_small_file(root):
    (root / "out.log").write_text("one\ntwo\n")
    output = read_output(str(root / "out.log"), owner_uid=OWNER, roots=[root])
    assert (output.text, output.size_bytes, output.truncated) == ("one\ntwo\n", 8, False)


def test_tail_lines_keeps_the_last_lines(root):
    (root / "out.log").write_text("".join(f"line {i}\n" for i in range(10)))
    output = read_output(str(root / "out.log"), owner_uid=OWNER, roots=[root], tail_lines=3)
    assert output.text == "line 7\nline 8\nline 9\n"
    assert output.truncated
    everything = read_output(str(root / "out.log"), owner_uid=OWNER, roots=[root], tail_lines=50)
    assert not everything.truncated and everything.text.count("\n") == 10


def test_carriage_returns_of_progress_bars_do_not_count_as_lines(root):
    (root / "out.log").write_text("start\n10%\r50%\r100%\ndone")
    output = read_output(str(root / "out.log"), owner_uid=OWNER, roots=[root], tail_lines=2)
    assert output.text == "10%\r50%\r100%\ndone"


def test_a_large_file_is_read_from_its_end_only(root):
    (root / "out.log").write_bytes(b"".join(b"row %05d\n" % i for i in range(10000)))
    output = read_output(str(root / "out.log"), owner_uid=OWNER, roots=[root], max_bytes=100)
    assert output.truncated and output.size_bytes == 100000
    assert output.text.endswith("row 09999\n")
    assert all(line.startswith("row ") for line in output.text.splitlines())  # no partial first


def test_invalid_utf8_is_replaced_not_an_error(root):
    (root / "out.log").write_bytes(b"ok \xff\xfe\n")
    output = read_output(str(root / "out.log"), owner_uid=OWNER, roots=[root])
    assert output.text == "ok \ufffd\ufffd\n"


def test_a_missing_file_is_not_written_yet(root):
    with pytest.raises(OutputUnavailable, match="not written"):
        read_output(str(root / "missing.out"), owner_uid=OWNER, roots=[root])
    with pytest.raises(OutputUnavailable, match="not written"):
        read_output(str(root / "no-dir" / "x.out"), owner_uid=OWNER, roots=[root])


def test_a_symlink_is_never_followed(root):
    (root / "out.log").symlink_to("/etc/passwd")
    with pytest.raises(OutputUnavailable, match="symbolic link"):
        read_output(str(root / "out.log"), owner_uid=OWNER, roots=[root])


def test_a_symlinked_folder_leading_outside_the_roots_is_refused(root, tmp_path_factory):
    outside = Path(os.path.realpath(tmp_path_factory.mktemp("outside")))
    (outside / "out.log").write_text("secret\n")
    (root / "logs").symlink_to(outside)
    with pytest.raises(OutputUnavailable, match="outside"):
        read_output(str(root / "logs" / "out.log"), owner_uid=OWNER, roots=[root])
    with pytest.raises(OutputUnavailable, match="outside"):
        read_output(str(root / ".." / outside.name / "out.log"), owner_uid=OWNER, roots=[root])


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_a_file_owned_by_another_user_is_not_yours_to_read(root):
    (root / "out.log").write_text("someone else's\n")
    os.chown(root / "out.log", 54321, -1)
    with pytest.raises(OutputUnavailable, match="not yours to read"):
        read_output(str(root / "out.log"), owner_uid=OWNER, roots=[root])
    assert read_output(str(root / "out.log"), owner_uid=54321, roots=[root]).text


def test_a_fifo_is_never_read(root):
    os.mkfifo(root / "out.log")
    with pytest.raises(OutputUnavailable, match="not a regular file"):
        read_output(str(root / "out.log"), owner_uid=OWNER, roots=[root])


def test_a_device_or_folder_is_never_read(root):
    with pytest.raises(OutputUnavailable, match="outside"):
        read_output("/dev/null", owner_uid=OWNER, roots=[root])
    (root / "sub").mkdir()
    with pytest.raises(OutputUnavailable, match="not a regular file"):
        read_output(str(root / "sub"), owner_uid=OWNER, roots=[root])
    with pytest.raises(OutputUnavailable, match="not a regular file"):
        read_output("/dev/null", owner_uid=OWNER, roots=[Path("/dev")])
