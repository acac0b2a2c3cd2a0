"""Paths that lead out of the owner's allowed folders, and output files that are not theirs.

Creation: a working directory, output or error path that is, or leads through a
symbolic link to, anywhere outside the owner's roots (PORTAL_JOB_ROOTS: their home
and /scratch/<user>) is refused on its field, through the API and the form.

Reading: the job's output is shown only if it is a plain file of the owner's in a
folder inside their roots; a link planted after the job was created, a FIFO, a
device, a hard link to someone else's file, a file of another user: each is refused,
and no byte of what it leads to is shown.

The files are real: alice and bob are the demo POSIX users; the tests run as root
and create what they need with the owners they need (a root-only file included).
Nothing here reaches Slurm.
"""

import os
import pwd
import shutil
import stat
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.test import Client

from accounts.models import LedgerEntry, User
from accounts.tokens import token_create
from clusters.models import Partition
from jobs.models import Job
from tests.security.conftest import (
    funded_project,
    kept_for_the_module,
    offline_cluster_create,
    person,
)

pytestmark = pytest.mark.django_db

ALICE = pwd.getpwnam("alice")
BOB = pwd.getpwnam("bob")
TAG = uuid.uuid4().hex[:8]
SECRET = f"sec-traversal-secret-{TAG}"  # what no refusal may show


def own(path: Path, entry: pwd.struct_passwd = ALICE) -> Path:
    os.chown(path, entry.pw_uid, entry.pw_gid, follow_symlinks=False)
    return path


def secret_file(path: Path, entry: pwd.struct_passwd, mode: int = 0o644) -> Path:
    path.write_text(f"{SECRET}\n")
    path.chmod(mode)
    return own(path, entry)


@dataclass(frozen=True)
class Places:
    home: Path  # alice's
    sandbox: Path  # a folder of alice's in her home, with the links below
    bobs: Path  # a folder of bob's in his home, with a file of his
    root_only: Path  # a root-owned 0600 file outside every root
    sibling: Path  # /home/alice<tag>: shares alice's home's prefix


def _make_places() -> Places:
    home = Path(ALICE.pw_dir)
    (home / "portal-tests").mkdir(exist_ok=True)
    own(home / "portal-tests")
    sandbox = home / "portal-tests" / f"sec-paths-{TAG}"
    sandbox.mkdir()
    own(sandbox)
    bobs = Path(BOB.pw_dir) / f"portal-sec-{TAG}"
    bobs.mkdir()
    own(bobs, BOB)
    secret_file(bobs / "slurm-900.out", BOB)
    root_dir = Path("/var/lib") / f"portal-sec-{TAG}"
    root_dir.mkdir(mode=0o700)
    root_only = secret_file(root_dir / "secret", pwd.getpwnam("root"), 0o600)
    sibling = Path(f"{home}{TAG}")
    sibling.mkdir()
    own(sibling)
    secret_file(sibling / "slurm-900.out", ALICE)  # alice's own, but outside her roots
    (sandbox / "runs").mkdir()
    own(sandbox / "runs")
    (sandbox / "notes.txt").write_text("notes\n")
    own(sandbox / "notes.txt")
    for name, target in {
        "etc": "/etc",
        "bob": BOB.pw_dir,
        "bobs": str(bobs),
        "secret": str(root_only),
        "dangling": "/nonexistent-sec/deeper",
        "escape": "../../..",  # relative: /home
        "inside": "runs",
    }.items():
        (sandbox / name).symlink_to(target)
        own(sandbox / name)
    return Places(home=home, sandbox=sandbox, bobs=bobs, root_only=root_only, sibling=sibling)


@dataclass(frozen=True)
class World:
    alice: User
    project_slug: str
    project_id: int
    partition: Partition
    places: Places


@pytest.fixture(scope="module")
def _module_world(django_db_setup, django_db_blocker, _seeded_by_migrations):
    places = _make_places()
    try:
        with kept_for_the_module(django_db_blocker, _seeded_by_migrations):
            cluster = offline_cluster_create()
            alice = person("sec-alice", posix="alice")
            project = funded_project("sec-paths", cluster=cluster, members={alice: "member"})
            yield World(
                alice=alice,
                project_slug=project.slug,
                project_id=project.pk,
                partition=cluster.partitions.get(name="debug"),
                places=places,
            )
    finally:
        for folder in (places.sandbox, places.bobs, places.root_only.parent, places.sibling):
            shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def world(_module_world, db, settings, celery_worker) -> World:
    settings.API_RATE = None
    # The session's worker reads the output (the web tier cannot read anyone's files)
    # with its own settings: these same roots, its defaults.
    settings.JOB_ROOTS = ["{home}", "/scratch/{user}"]
    return _module_world


def api_client(world: World) -> Client:
    _, plain = token_create(user=world.alice, name="paths")
    return Client(headers={"Authorization": f"Bearer {plain}"})


def web_client(world: World) -> Client:
    client = Client()
    client.force_login(world.alice)
    return client


# --- creation ---------------------------------------------------------------------------


def fill(template: str, places: Places) -> str:
    return template.format(
        home=places.home, sandbox=places.sandbox, sibling=places.sibling, bobs=places.bobs,
        root_only=places.root_only,
    )  # fmt: skip


OUTSIDE = [
    # (id, path, what the message says)
    ("dotdot", "{home}/../bob", "'..'"),
    ("dotdot-deep", "{sandbox}/runs/../../../../../etc", "'..'"),
    ("dot-dotdot", "{sandbox}/./../../../../etc", "'..'"),
    ("trailing-dotdot", "{sandbox}/runs/..", "'..'"),  # even when it stays inside
    ("dotdot-slash", "{home}/../../etc/", "'..'"),
    ("percent-encoded", "{home}/%2e%2e/bob", "'%"),
    ("percent-encoded-slash", "{home}/..%2fbob", "'%"),
    ("double-slash-outside", "//etc", "outside"),
    ("double-slash-inside-then-out", "{home}//..//bob", "'..'"),
    ("absolute-etc", "/etc", "outside"),
    ("absolute-root", "/root", "outside"),
    ("absolute-tmp", "/tmp", "outside"),
    ("filesystem-root", "/", "outside"),
    ("root-only-folder", "{root_only}", "outside"),
    ("sibling-with-shared-prefix", "{sibling}", "outside"),
    ("sibling-subfolder", "{sibling}/runs", "outside"),
    ("other-users-home", "{bobs}", "outside"),
    ("symlink-to-etc", "{sandbox}/etc", "symbolic link"),
    ("through-symlink-to-etc", "{sandbox}/etc/cron.d", "symbolic link"),
    ("through-symlink-to-bob", "{sandbox}/bob/work", "symbolic link"),
    ("through-symlink-to-bobs-folder", "{sandbox}/bobs", "symbolic link"),
    ("symlink-to-root-only-file", "{sandbox}/secret", "symbolic link"),
    ("relative-symlink-escaping", "{sandbox}/escape/bob", "symbolic link"),
    ("dangling-symlink", "{sandbox}/dangling/new", "symbolic link"),
    ("two-dot-leader", "{home}/\u2025/bob", "position"),
    ("fullwidth-dots", "{home}/\uff0e\uff0e/bob", "position"),
    ("relative", "runs", "absolute"),
    ("home-shorthand", "~/runs", "position"),
    ("nul", "{home}/runs\x00/etc", "Null characters"),  # refused before the checks
]


@dataclass(frozen=True)
class Refused:
    id: str
    field: str
    value: str
    says: str
    working_directory: str = "{sandbox}/runs"


CREATION = [
    Refused(f"{field}-{case}", field, path, says)
    for field in ("working_directory", "output_path", "error_path")
    for case, path, says in OUTSIDE
    # An output path may be relative (to the working directory); "~/runs" then is
    # refused for its '~', "runs" is not refused at all.
    if not (field != "working_directory" and case == "relative")
] + [
    Refused("working_directory-a-file", "working_directory", "{sandbox}/notes.txt", "not a folder"),
    Refused("output_path-relative-dotdot", "output_path", "../../../etc/x.out", "'..'"),
    Refused(
        "output_path-relative-symlink",
        "output_path",
        "etc/x.out",
        "symbolic link",
        working_directory="{sandbox}",
    ),
    Refused(
        "error_path-relative-symlink",
        "error_path",
        "bob/x.err",
        "symbolic link",
        working_directory="{sandbox}",
    ),
    Refused("output_path-pattern-dotdot", "output_path", "{home}/%x/../x.out", "'..'"),
]


def body(world: World, **fields: str) -> dict:
    return {
        "project": world.project_slug,
        "partition": "debug",
        "name": "paths",
        "nodes": 1,
        "gpus_per_node": 1,
        "time_limit_minutes": 5,
        "working_directory": str(world.places.sandbox / "runs"),
        "script": "echo hi\n",
        **fields,
    }


@pytest.mark.parametrize("way", ["api", "web"])
@pytest.mark.parametrize("case", CREATION, ids=lambda case: case.id)
def test_a_path_out_of_the_allowed_folders_is_refused_on_its_field(world, case, way):
    fields = {
        "working_directory": fill(case.working_directory, world.places),
        case.field: fill(case.value, world.places),
    }
    ledger = LedgerEntry.objects.count()
    if way == "api":
        response = api_client(world).post(
            "/api/v1/jobs/", body(world, **fields), content_type="application/json"
        )
        assert response.status_code == 400, response.content
        error = response.json()["error"]
        assert error["code"] == "invalid"
        messages = " ".join(error["fields"][case.field])
        assert case.says in messages, messages
    else:
        response = web_client(world).post("/jobs/new/", body(world, **fields))
        assert response.status_code == 400
        assert set(response.context["form"].errors) == {case.field}
    assert SECRET not in response.content.decode()
    assert not Job.objects.exists()
    assert LedgerEntry.objects.count() == ledger


@pytest.mark.parametrize(
    ("field", "path", "saved"),
    [
        ("working_directory", "{sandbox}//runs/./", "{sandbox}/runs"),
        ("working_directory", "{sandbox}/inside/deeper", "{sandbox}/inside/deeper"),
        ("working_directory", "{home}/.../x", "{home}/.../x"),  # "..." is a name
        ("output_path", "logs/%x-%j.out", "{sandbox}/runs/logs/%x-%j.out"),
        ("error_path", "{home}//%j.err", "{home}/%j.err"),
    ],
)
def test_a_path_inside_is_kept_normalised(world, field, path, saved):
    response = api_client(world).post(
        "/api/v1/jobs/",
        body(world, **{field: fill(path, world.places)}),
        content_type="application/json",
    )
    assert response.status_code == 201, response.json()
    assert response.json()[field] == fill(saved, world.places)


# --- reading the output -----------------------------------------------------------------

JOB_ID = 900


def stored_job(world: World, *, output_path: str, name: str = "paths") -> Job:
    """A job as the pipeline leaves it once Slurm has it (its paths as given: a path
    stored before a check existed, or changed on disk since, is what the reader faces)."""
    return Job.objects.create(
        owner=world.alice,
        project_id=world.project_id,
        cluster=world.partition.cluster,
        partition=world.partition,
        name=name,
        gpus_per_node=1,
        time_limit_minutes=5,
        working_directory=str(world.places.sandbox),
        output_path=output_path,
        error_path=output_path,
        script="echo hi\n",
        rendered_script="#!/bin/bash\necho hi\n",
        billing_weight=world.partition.billing_weight,
        requested_gpu_seconds=300,
        slurm_job_id=JOB_ID,
        state=Job.State.COMPLETED,
    )


def case_folder(world: World) -> Path:
    folder = world.places.sandbox / f"case-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    own(folder)
    return folder


def planted_link(target: Callable[[Places, Path], str]):
    def plant(places: Places, folder: Path) -> str:
        link = folder / f"slurm-{JOB_ID}.out"
        link.symlink_to(target(places, folder))
        own(link)
        return str(folder / "slurm-%j.out")

    return plant


def _alice_file(places: Places, folder: Path) -> str:
    real = secret_file(folder / "real.txt", ALICE)
    return str(real)


def _fifo(places: Places, folder: Path) -> str:
    os.mkfifo(folder / f"slurm-{JOB_ID}.out")
    own(folder / f"slurm-{JOB_ID}.out")
    return str(folder / "slurm-%j.out")


def _device(places: Places, folder: Path) -> str:
    os.mknod(folder / f"slurm-{JOB_ID}.out", stat.S_IFCHR | 0o644, os.makedev(1, 5))  # zero
    own(folder / f"slurm-{JOB_ID}.out")
    return str(folder / "slurm-%j.out")


def _directory(places: Places, folder: Path) -> str:
    (folder / f"slurm-{JOB_ID}.out").mkdir()
    own(folder / f"slurm-{JOB_ID}.out")
    return str(folder / "slurm-%j.out")


def _owned_by(entry: pwd.struct_passwd, mode: int = 0o644):
    def plant(places: Places, folder: Path) -> str:
        secret_file(folder / f"slurm-{JOB_ID}.out", entry, mode)
        return str(folder / "slurm-%j.out")

    return plant


def _hard_link(source: Callable[[Places], Path]):
    def plant(places: Places, folder: Path) -> str:
        try:
            os.link(source(places), folder / f"slurm-{JOB_ID}.out")
        except OSError as error:  # another filesystem
            pytest.skip(f"cannot hard-link here: {error}")
        return str(folder / "slurm-%j.out")

    return plant


def _folder_link(target: Callable[[Places], str], name: str):
    def plant(places: Places, folder: Path) -> str:
        (folder / "logs").symlink_to(target(places))
        own(folder / "logs")
        return str(folder / "logs" / name)

    return plant


def _alice_file_in_bobs_folder(places: Places, folder: Path) -> str:
    # Even a file of alice's does not make bob's folder hers to show.
    secret_file(places.bobs / f"alice-{folder.name}.out", ALICE)
    (folder / "logs").symlink_to(places.bobs)
    own(folder / "logs")
    return str(folder / "logs" / f"alice-{folder.name}.out")


def _fixed(path: str):
    return lambda places, folder: path.format(
        home=places.home, bobs=places.bobs, sibling=places.sibling, root_only=places.root_only
    )


READER_CASES = [
    # (id, plant → the job's output_path, job name, what the refusal says)
    ("link-to-etc-shadow", planted_link(lambda p, f: "/etc/shadow"), "symbolic link"),
    ("link-to-root-only-file", planted_link(lambda p, f: str(p.root_only)), "symbolic link"),
    ("link-to-bobs-file", planted_link(lambda p, f: str(p.bobs / "slurm-900.out")),
     "symbolic link"),
    ("link-to-own-file", planted_link(_alice_file), "symbolic link"),  # never followed
    ("relative-link", planted_link(lambda p, f: "../../../../bob"), "symbolic link"),
    ("dangling-link", planted_link(lambda p, f: "/nonexistent-sec/x"), "symbolic link"),
    ("link-to-itself", planted_link(lambda p, f: f"slurm-{JOB_ID}.out"), "symbolic link"),
    ("fifo", _fifo, "not a regular file"),
    ("device", _device, "not a regular file"),
    ("directory", _directory, "not a regular file"),
    ("file-of-bob", _owned_by(BOB), "another user"),
    ("root-only-file", _owned_by(pwd.getpwnam("root"), 0o600), "another user"),
    ("hard-link-to-root-only-file", _hard_link(lambda p: p.root_only), "another user"),
    ("hard-link-to-bobs-file", _hard_link(lambda p: p.bobs / "slurm-900.out"), "another user"),
    ("folder-link-to-bob", _folder_link(lambda p: str(p.bobs), "slurm-900.out"), "outside"),
    ("folder-link-to-etc", _folder_link(lambda p: "/etc", "passwd"), "outside"),
    ("alice-file-in-bobs-folder", _alice_file_in_bobs_folder, "outside"),
    ("dotdot-in-stored-path", _fixed("{home}/../bob/portal-sec-" + TAG + "/slurm-%j.out"),
     "outside"),
    ("absolute-outside", _fixed("/etc/passwd"), "outside"),
    ("root-only-folder", _fixed("{root_only}"), "outside"),
    ("sibling-with-shared-prefix", _fixed("{sibling}/slurm-%j.out"), "outside"),
]  # fmt: skip


@pytest.fixture
def planted(world):
    """plant(how) -> a stored job of alice's whose output is what ``how`` planted."""

    def plant(how, name: str = "paths") -> Job:
        return stored_job(world, output_path=how(world.places, case_folder(world)), name=name)

    return plant


def check_reader_refuses(world: World, job: Job, says: str) -> None:
    response = api_client(world).get(f"/api/v1/jobs/{job.pk}/output/")
    assert response.status_code == 404, response.content
    error = response.json()["error"]
    assert error["code"] == "output_unavailable", error
    assert says in error["message"], error
    assert SECRET not in response.content.decode()
    assert "root:" not in response.content.decode()  # nothing of /etc/passwd or shadow

    page = web_client(world).get(f"/jobs/{job.pk}/output/")
    assert page.status_code == 200
    html = page.content.decode()
    assert page.context["unavailable"] and "output" not in page.context
    assert SECRET not in html and "root:" not in html


@pytest.mark.parametrize(("how", "says"), [pytest.param(h, s, id=i) for i, h, s in READER_CASES])
def test_the_reader_refuses_what_is_not_the_owners_plain_file(world, planted, how, says):
    check_reader_refuses(world, planted(how), says)


def test_a_name_of_dots_in_a_pattern_cannot_climb_out(world, planted):
    # A name is never only dots since the name check; a stored one must still not
    # turn %x into "..".
    job = planted(_fixed("{home}/%x/bob/portal-sec-" + TAG + "/slurm-%j.out"), name="..")
    check_reader_refuses(world, job, "outside")


def test_the_owners_plain_file_is_shown(world, planted):
    """The control: the same rig shows what it should."""
    job = planted(_owned_by(ALICE))
    response = api_client(world).get(f"/api/v1/jobs/{job.pk}/output/")
    assert response.status_code == 200
    assert response.json()["text"] == f"{SECRET}\n"


def test_a_link_planted_after_the_job_was_created_is_not_followed(world):
    """The job is made through the API with a path that passes every check; then its
    owner swaps the output file for a link to a file only root may read."""
    folder = world.places.sandbox / f"late-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    own(folder)
    response = api_client(world).post(
        "/api/v1/jobs/",
        body(world, working_directory=str(folder), output_path="slurm-%j.out"),
        content_type="application/json",
    )
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    Job.objects.filter(pk=job.pk).update(slurm_job_id=JOB_ID, state=Job.State.RUNNING)
    secret_file(folder / f"slurm-{JOB_ID}.out", ALICE)
    assert api_client(world).get(f"/api/v1/jobs/{job.pk}/output/").status_code == 200

    (folder / f"slurm-{JOB_ID}.out").unlink()
    (folder / f"slurm-{JOB_ID}.out").symlink_to(world.places.root_only)
    own(folder / f"slurm-{JOB_ID}.out")
    check_reader_refuses(world, job, "symbolic link")
