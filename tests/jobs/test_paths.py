"""Allowed roots and the working-directory / output-path checks against them."""

import os
from pathlib import Path

import pytest

from jobs.errors import JobInvalid
from jobs.paths import allowed_roots, check_directory, check_output_path


@pytest.fixture
def root(tmp_path) -> Path:
    return Path(os.path.realpath(tmp_path))


def refused(call, *args, **kwargs) -> dict[str, list[str]]:
    with pytest.raises(JobInvalid) as caught:
        call(*args, **kwargs)
    return caught.value.fields


def test_roots_come_from_templates_with_user_and_home():
    roots = allowed_roots("root", ["{home}", "/scratch/{user}", "{home}"])
    assert roots == [Path("/root"), Path("/scratch/root")]


@pytest.mark.parametrize("user", ["no-such-user-xyz", "", "bad\x00name"])
def test_an_unknown_user_has_no_roots(user):
    [message] = refused(allowed_roots, user, ["{home}"])["__all__"]
    assert "does not exist" in message


def test_a_relative_root_template_is_a_configuration_error():
    with pytest.raises(ValueError):
        allowed_roots("root", ["scratch/{user}"])


def test_a_directory_inside_a_root_is_normalised(root):
    assert check_directory(f"{root}//runs/./a/", roots=[root], field="wd") == f"{root}/runs/a"
    assert check_directory(str(root), roots=[root], field="wd") == str(root)


def test_a_directory_outside_every_root_is_refused_naming_the_roots(root):
    [message] = refused(check_directory, "/etc", roots=[root, Path("/scratch/x")], field="wd")["wd"]
    assert str(root) in message and "/scratch/x" in message


def test_a_sibling_with_the_same_prefix_is_outside(root):
    assert refused(check_directory, f"{root}-other/x", roots=[root], field="wd")


BAD_DIRECTORIES = [
    *("{root}/../etc", "{root}/a/../../etc", "{root}/..", "runs", ""),
    *("{root}/a\nb", "{root}/a b", "{root}/$(id)", "{root}/a;b", "{root}/%j"),
    "{root}/" + "x" * 1100,
]


@pytest.mark.parametrize("path", BAD_DIRECTORIES)
def test_a_bad_working_directory_is_refused_on_its_field(root, path):
    field = "working_directory"
    fields = refused(check_directory, path.format(root=root), roots=[root], field=field)
    assert list(fields) == [field]


def test_dotdot_is_named_in_the_message(root):
    [message] = refused(check_directory, f"{root}/../etc", roots=[root], field="wd")["wd"]
    assert "'..'" in message


def test_a_symlink_inside_a_root_that_leads_out_is_refused(root):
    (root / "etc").symlink_to("/etc")
    (root / "dangling").symlink_to("/nonexistent-dir/deeper")
    for path in (f"{root}/etc", f"{root}/etc/ssh", f"{root}/etc/new/folder", f"{root}/dangling"):
        [message] = refused(check_directory, path, roots=[root], field="wd")["wd"]
        assert "symbolic link" in message
    with pytest.raises(JobInvalid):
        check_output_path("etc/out.log", working_directory=str(root), roots=[root], field="out")


def test_a_symlink_that_stays_inside_is_allowed(root):
    (root / "real").mkdir()
    (root / "link").symlink_to(root / "real")
    assert check_directory(f"{root}/link/x", roots=[root], field="wd") == f"{root}/link/x"


def test_a_file_is_not_a_working_directory(root):
    (root / "notes.txt").write_text("x")
    [message] = refused(check_directory, f"{root}/notes.txt", roots=[root], field="wd")["wd"]
    assert "not a folder" in message


def test_output_paths_resolve_against_the_working_directory_and_keep_patterns(root):
    wd = f"{root}/runs"

    def check(path: str) -> str:
        return check_output_path(path, working_directory=wd, roots=[root], field="o")

    assert check("logs/%x-%A_%a.out") == f"{wd}/logs/%x-%A_%a.out"
    assert check(f"{root}/%u/%j.%N.out") == f"{root}/%u/%j.%N.out"
    assert check(f"{root}/100%%.log") == f"{root}/100%%.log"


@pytest.mark.parametrize("path", ["%s.out", "%t.out", "%4j.out", "out%", "../x.out", "a\n.out"])
def test_output_paths_refuse_other_patterns_and_escapes(root, path):
    fields = refused(check_output_path, path, working_directory=str(root), roots=[root], field="o")
    assert list(fields) == ["o"]
