"""Hostile input to the job composer (the web form) and the API (create and estimate).

Every hostile value is refused on its own field: a 400 in the one error shape
naming the field, or the form shown again with the error beside the field; and
nothing is saved, held in the ledger or enqueued. What is legitimately accepted
(``$HOME`` in a script, quotes in a value) is checked in the rendered script: it
never reaches a directive sbatch reads, and a value reaches the job verbatim.

What sbatch reads as a directive (Slurm 22.05, checked on the dev cluster by
``test_sbatch_itself_reads_these_lines``): a line starting exactly with
``#SBATCH``, ``#SLURM``, ``#PBS`` or ``#BSUB``, in the comments before the first
command. The portal refuses more than that for ``#SBATCH`` (any spacing or case,
DESIGN "Safe scripts") and exactly that, case aside, for the other three, so that
prose comments such as "# Slurm sets SLURM_JOB_ID" still pass.
"""

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import pytest
from django.test import Client

from accounts.models import LedgerEntry, User
from accounts.tokens import token_create
from clusters.slurm.cli import export_argument
from jobs.models import Job, JobTemplate
from jobs.requests import JobRequest, job_prepare
from jobs.submission import submit_request_for
from tests.security.conftest import (
    funded_project,
    kept_for_the_module,
    offline_cluster_create,
    person,
)

pytestmark = pytest.mark.django_db

MAX_SCRIPT_BYTES = 256 * 1024  # PORTAL_JOB_MAX_SCRIPT_BYTES' default
CANARY = "/tmp/portal-sec-canary"


@dataclass(frozen=True)
class World:
    alice: User
    project_slug: str
    others_template: int


@pytest.fixture(scope="module")
def _module_world(django_db_setup, django_db_blocker, _seeded_by_migrations):
    with kept_for_the_module(django_db_blocker, _seeded_by_migrations):
        cluster = offline_cluster_create()
        alice = person("sec-alice", posix="alice")
        bob = person("sec-bob", posix="bob")
        project = funded_project("sec-inject", cluster=cluster, members={alice: "member"})
        template = JobTemplate.objects.create(
            name="bob's", scope="user", owner=bob, script="true\n"
        )
        yield World(alice=alice, project_slug=project.slug, others_template=template.pk)


@pytest.fixture
def world(_module_world, db, settings) -> World:
    settings.API_RATE = None
    settings.JOB_MAX_SCRIPT_BYTES = MAX_SCRIPT_BYTES
    return _module_world


def base_request(world: World) -> dict:
    return {
        "project": world.project_slug,
        "partition": "debug",
        "name": "inject",
        "nodes": 1,
        "gpus_per_node": 1,
        "time_limit_minutes": 5,
        "script": "echo hi\n",
    }


# --- the corpus -------------------------------------------------------------------------

WEB, API, ESTIMATE = "web", "api", "estimate"
# The estimate runs the very checks of a create (jobs.requests.job_prepare): it is
# sent the script and environment corpus, the two ways code could reach the job.
EVERY_WAY = (WEB, API, ESTIMATE)
API_ONLY = (API, ESTIMATE)  # what a browser's form cannot even send


@dataclass(frozen=True)
class Hostile:
    id: str
    field: str  # the field the refusal must name
    value: object
    ways: tuple[str, ...] = EVERY_WAY
    says: str = ""  # a phrase the message must contain (API)


def sbatch_lines(*lines: str) -> str:
    return "echo start\n" + "\n".join(lines) + "\necho end\n"


SCRIPTS = [
    Hostile("sbatch", "script", "#SBATCH --gres=gpu:8\necho\n", says="Line 1"),
    Hostile("sbatch-spaces", "script", sbatch_lines("    #SBATCH --qos=high"), says="Line 2"),
    Hostile("sbatch-tab", "script", sbatch_lines("\t#SBATCH --qos=high"), says="Line 2"),
    Hostile("sbatch-space-after-hash", "script", sbatch_lines("# SBATCH --qos=high")),
    Hostile("sbatch-tab-after-hash", "script", sbatch_lines("#\tSBATCH --qos=high")),
    Hostile("sbatch-lower", "script", sbatch_lines("#sbatch --qos=high")),
    Hostile("sbatch-mixed-case", "script", sbatch_lines("#sBaTcH --qos=high")),
    Hostile("sbatch-after-cr", "script", sbatch_lines("\r#SBATCH --qos=high")),
    Hostile("sbatch-vertical-tab", "script", sbatch_lines("\x0b#SBATCH --qos=high")),
    Hostile("sbatch-nbsp", "script", sbatch_lines("\u00a0#SBATCH --qos=high")),
    Hostile("sbatch-bom", "script", "\ufeff#SBATCH --qos=high\necho\n", says="Line 1"),
    Hostile("sbatch-bom-later", "script", sbatch_lines("\ufeff#SBATCH --qos=high")),
    Hostile("sbatch-zero-width", "script", sbatch_lines("#\u200bSBATCH --qos=high")),
    Hostile("sbatch-crlf", "script", "echo\r\n#SBATCH --qos=high\r\n", says="Line 2"),
    Hostile("sbatch-in-heredoc", "script", "cat <<EOF\n#SBATCH --qos=high\nEOF\n"),
    Hostile("sbatch-many", "script", "\n".join(["#SBATCH -p x"] * 12), says="Lines 1, 2"),
    Hostile("slurm-prefix", "script", "#SLURM --qos=high\necho\n", says="#SLURM"),
    Hostile("slurm-prefix-indented", "script", sbatch_lines("  #SLURM --exclusive")),
    Hostile("slurm-prefix-glued", "script", "#SLURMX --exclusive\necho\n"),
    Hostile("pbs-prefix", "script", "#PBS -l walltime=999:00:00\necho\n", says="#PBS"),
    Hostile("pbs-lower", "script", "#pbs -N x\necho\n"),
    Hostile("bsub-prefix", "script", "#BSUB -W 9999\necho\n", says="#BSUB"),
    Hostile("nul", "script", "echo a\x00#SBATCH --qos=high\n"),
    Hostile("empty", "script", "  \n\t\n"),
    Hostile("oversize", "script", "#" * (MAX_SCRIPT_BYTES + 1), says="bytes"),
    Hostile("oversize-multibyte", "script", "é" * (MAX_SCRIPT_BYTES // 2 + 1), says="bytes"),
    Hostile("foreign-shebang", "script", "#!/usr/bin/python3\nprint(1)\n", says="Line 1"),
    Hostile("shebang-rcfile", "script", "#!/bin/bash --rcfile /tmp/x\necho\n"),
    Hostile("shebang-login", "script", "#!/bin/bash -l\necho\n"),
    # Lone surrogates: no UTF-8 encodes them, so only JSON's \ud800 escapes can send one.
    Hostile("surrogate", "script", "echo \ud800\n", ways=API_ONLY),
]

NAMES = [
    Hostile(f"name-{label}", "name", value)
    for label, value in [
        ("newline", "train\nrm-rf"),
        ("cr", "train\rx"),
        ("nul", "train\x00x"),
        ("subshell", "x$(id)"),
        ("backticks", "x`id`"),
        ("semicolon", "a;b"),
        ("single-quote", "a'b"),
        ("double-quote", 'a"b'),
        ("space", "a b"),
        ("u2028", "a\u2028b"),
        ("nel", "a\u0085b"),
        ("bom", "a\ufeffb"),
        ("html", "<img src=x onerror=alert(1)>"),
        ("slash", "a/../../etc"),
        ("dots", ".."),
        ("unicode", "tränen"),
        ("sbatch", "x\n#SBATCH --qos=high"),
    ]
] + [
    Hostile("name-too-long", "name", "x" * 65, ways=API_ONLY),  # the form's max_length: 64
    Hostile("name-surrogate", "name", "a\udc80b", ways=API_ONLY),
]

ENVIRONMENT_KEYS = [
    Hostile(f"env-key-{key}", "environment", {key: "x"}, says=key)
    for key in [
        "LD_PRELOAD", "LD_AUDIT", "BASH_ENV", "ENV", "IFS", "PS4", "PROMPT_COMMAND",
        "SHELLOPTS", "BASHOPTS", "SLURM_ACCOUNT", "SLURM_CONF", "SBATCH_PARTITION",
        "SALLOC_ACCOUNT", "SRUN_CPUS_PER_TASK",
    ]
] + [
    Hostile(f"env-key-{label}", "environment", {key: "x"}, ways=ways)
    for label, key, ways in [
        ("equals", "A=B", API_ONLY),
        ("space", "A B", EVERY_WAY),
        ("dash", "A-B", EVERY_WAY),
        ("digit-first", "1A", EVERY_WAY),
        ("subshell", "$(id)", EVERY_WAY),
        ("bash-function", "BASH_FUNC_x%%", EVERY_WAY),
        ("unicode", "CAFÉ", EVERY_WAY),
        ("newline", "A\nLD_PRELOAD", API_ONLY),
        ("nul", "A\x00B", API_ONLY),
        ("u2028", "A\u2028B", API_ONLY),
        ("empty", "", API_ONLY),
        ("too-long", "X" * 129, EVERY_WAY),
    ]
]  # fmt: skip

ENVIRONMENT_VALUES = [
    Hostile(f"env-value-{label}", "environment", {"X": value}, ways=ways)
    for label, value, ways in [
        ("newline", "a\nexport LD_PRELOAD=/tmp/x.so", EVERY_WAY),
        ("cr", "a\rb", EVERY_WAY),
        ("nul", "a\x00b", EVERY_WAY),
        ("tab", "a\tb", EVERY_WAY),
        ("escape", "a\x1b[2Jb", EVERY_WAY),
        ("u2028", "a\u2028LD_PRELOAD=/tmp/x.so", EVERY_WAY),
        ("nel", "a\u0085b", EVERY_WAY),
        ("too-long", "v" * 4097, EVERY_WAY),
    ]
] + [Hostile("env-too-many", "environment", {f"V{i}": "x" for i in range(101)})]

ARRAYS = [
    Hostile(f"array-{label}", "array", value, ways=ways)
    for label, value, ways in [
        ("newline", "0-9\n#SBATCH --qos=high", EVERY_WAY),
        ("semicolon", "0-9;id", EVERY_WAY),
        ("subshell", "$(id)", EVERY_WAY),
        ("option", "0-9 --qos=high", EVERY_WAY),
        ("comma-directive", "0-9%2,#SBATCH", EVERY_WAY),
        ("arabic-digit", "0-٣", EVERY_WAY),
        ("negative", "-1", EVERY_WAY),
        ("huge-index", "4000001", EVERY_WAY),
        ("too-many-tasks", "0-10000", EVERY_WAY),
        ("zero-limit", "0-9%0", EVERY_WAY),
        ("too-long", "1," * 40, API_ONLY),
    ]
]

PARTITIONS = [
    Hostile(f"partition-{label}", "partition", value)
    for label, value in [
        ("newline", "debug\n#SBATCH --qos=high"),
        ("option", "debug --qos=high"),
        ("list", "debug,gpu"),
        ("subshell", "$(id)"),
        ("traversal", "../debug"),
        ("case", "DEBUG"),
        ("unknown", "nosuch"),
    ]
]

PATHS = [
    Hostile(f"{field}-{label}", field, value)
    for field in ("working_directory", "output_path", "error_path")
    for label, value in [
        ("home-variable", "$HOME/run"),
        ("tilde", "~/run"),
        ("subshell", "/home/alice/$(id)"),
        ("backticks", "/home/alice/`id`"),
        ("space", "/home/alice/a b"),
        ("newline", "/home/alice/x\n#SBATCH --qos=high"),
        ("semicolon", "/home/alice/x;id"),
        ("quote", "/home/alice/it's"),
        ("u2028", "/home/alice/x\u2028y"),
    ]
] + [
    Hostile("output_path-unknown-pattern", "output_path", "/home/alice/%s.out"),
    Hostile("output_path-padded-pattern", "output_path", "/home/alice/%4j.out"),
    Hostile("working_directory-pattern", "working_directory", "/home/alice/%j"),
]

OTHERS = [
    Hostile("project-newline", "project", "sec-inject\nx"),
    Hostile("project-sql", "project", "' OR 1=1 --"),
    Hostile("cluster-newline", "cluster", "sec-offline\nx", ways=API_ONLY),
    Hostile("template-of-another-user", "template", "others", ways=API_ONLY),
]

CORPUS = SCRIPTS + NAMES + ENVIRONMENT_KEYS + ENVIRONMENT_VALUES + ARRAYS + PARTITIONS
CORPUS += PATHS + OTHERS
ESTIMATED = {case.id for case in SCRIPTS + ENVIRONMENT_VALUES}
CASES = [
    pytest.param(case, way, id=f"{case.id}-{way}")
    for case in CORPUS
    for way in case.ways
    if way != ESTIMATE or case.id in ESTIMATED
]


def test_the_corpus_has_unique_ids():
    ids = [case.id for case in CORPUS]
    assert len(ids) == len(set(ids))


# --- sending it -------------------------------------------------------------------------


def _value(case: Hostile, world: World) -> object:
    return world.others_template if case.value == "others" else case.value


def send(way: str, world: World, case: Hostile):
    body = {**base_request(world), case.field: _value(case, world)}
    if way == WEB:
        client = Client()
        client.force_login(world.alice)
        if isinstance(body.get("environment"), dict):
            body["environment"] = "\n".join(f"{k}={v}" for k, v in body["environment"].items())
        return client.post("/jobs/new/", body)
    _, plain = token_create(user=world.alice, name="inject")
    client = Client(headers={"Authorization": f"Bearer {plain}"})
    url = "/api/v1/jobs/" if way == API else "/api/v1/jobs/estimate/"
    return client.post(url, json.dumps(body), content_type="application/json")


CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x85\u2028\u2029]")


def check_api_refusal(response, case: Hostile) -> None:
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert error["code"] == "invalid", error
    # DRF names a value inside an object by its key ("environment.X").
    named = [f for f in error["fields"] if f == case.field or f.startswith(f"{case.field}.")]
    assert named, error
    messages = [message for f in named for message in error["fields"][f]]
    assert messages and all(isinstance(m, str) and m for m in messages), error
    text = " ".join(messages)
    if case.says:
        assert case.says in text, text
    # Whatever was sent, the answer shows it escaped: no control characters or line
    # separators travel back into a terminal or a log.
    every = [error["message"], *(m for ms in error["fields"].values() for m in ms)]
    assert not any(CONTROL.search(message) for message in every), error


def check_form_refusal(response, case: Hostile) -> None:
    form = response.context["form"]
    assert set(form.errors) == {case.field}, form.errors
    html = response.content.decode()
    shown = re.search(rf'<p id="error-{case.field}"[^>]*>(.*?)</p>', html, re.DOTALL)
    assert shown and shown[1].strip(), f"no error shown beside {case.field}"
    if isinstance(case.value, str) and "<" in case.value:
        assert case.value not in html  # escaped when the form is shown again


@pytest.mark.parametrize(("case", "way"), CASES)
def test_hostile_input_is_refused_on_its_field(
    world, case, way, django_capture_on_commit_callbacks
):
    ledger = LedgerEntry.objects.count()
    with django_capture_on_commit_callbacks() as callbacks:
        response = send(way, world, case)

    assert response.status_code == 400, response.content[:500]
    if way == WEB:
        check_form_refusal(response, case)
    else:
        check_api_refusal(response, case)
    assert not Job.objects.exists()
    assert LedgerEntry.objects.count() == ledger
    assert callbacks == []


def test_a_body_that_is_not_utf8_is_refused_and_saves_nothing(world):
    _, plain = token_create(user=world.alice, name="inject")
    client = Client(headers={"Authorization": f"Bearer {plain}"})
    body = json.dumps(base_request(world)).encode().replace(b"echo hi", b"echo \xff\xfe")
    for url in ("/api/v1/jobs/", "/api/v1/jobs/estimate/"):
        response = client.post(url, body, content_type="application/json")
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "parse_error"
    assert not Job.objects.exists()


def test_invalid_utf8_in_a_form_field_is_refused_on_that_field(world):
    # Django decodes a form with replacement characters, which no strict field accepts.
    client = Client()
    client.force_login(world.alice)
    body = urlencode({k: v for k, v in base_request(world).items() if k != "name"})
    response = client.post(
        "/jobs/new/", body + "&name=a%FF%FEb", content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code == 400
    assert "name" in response.context["form"].errors
    assert not Job.objects.exists()


# --- what is accepted, and how it is rendered -------------------------------------------

SBATCH_MAGIC = ("#SBATCH", "#SLURM", "#PBS", "#BSUB")


def directives_sbatch_reads(script: str) -> list[str]:
    """The lines sbatch 22.05 takes as directives (src/sbatch/opt.c, checked against the
    real sbatch below): those starting with a magic word, until the first command."""
    found = []
    for line in script.split("\n")[1:]:
        if line.startswith(SBATCH_MAGIC):
            found.append(line)
        elif line.lstrip(" \t\v\f\r") and not line.lstrip(" \t\v\f\r").startswith("#"):
            break
    return found


def portal_header(script: str) -> list[str]:
    """The directives the portal wrote: the block right after the shebang."""
    lines = script.split("\n")
    header = []
    for line in lines[1:]:
        if not line.startswith("#SBATCH --"):
            break
        header.append(line)
    return header


def prepared(world: World, **fields):
    request = JobRequest(**{**base_request(world), **fields})
    return job_prepare(user=world.alice, request=request, submit_token="sec-token")


def run_with_bash(script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    path = tmp_path / "job.sh"
    path.write_text(script)
    return subprocess.run(
        ["bash", "--noprofile", "--norc", str(path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        timeout=10,
    )


ACCEPTED_SCRIPTS = [
    "echo $HOME\n",
    "echo $(hostname) `date` ${USER:-nobody}\n",
    "echo '#SBATCH --qos=high'\n",
    'echo "#SLURM --exclusive"\n',
    "true  # SBATCH --qos=high, as a trailing comment\n",
    "# Slurm sets SLURM_JOB_ID; this prints it\necho $SLURM_JOB_ID\n",
    "# PBS-era notes: none of this is a directive\necho\n",
    "echo one\u2028#SBATCH --qos=high\n",  # U+2028 breaks no line for bash or sbatch
    "echo one\u0085#SBATCH --qos=high\n",
    "echo one\r#SBATCH --qos=high\n",  # nor does a lone CR
    "\uff03SBATCH --qos=high\necho\n",  # a full-width number sign is not '#'
    "#!/usr/bin/env bash\necho hi\r\n\r\n",
    "echo hi\r\r\n",
]


@pytest.mark.parametrize("script", ACCEPTED_SCRIPTS)
def test_an_accepted_script_reaches_no_directive(world, script):
    job = prepared(world, script=script)
    rendered = job.rendered_script
    header = portal_header(rendered)
    assert header and header[-1].startswith("#SBATCH --comment=portal:")
    # sbatch reads exactly the portal's directives, and none of the body.
    assert directives_sbatch_reads(rendered) == header
    assert "\r\n" not in rendered  # sbatch refuses DOS line breaks
    lines = rendered.split("\n")
    for line in script.split("\n"):
        if not line.startswith("#!"):
            assert line.rstrip("\r") in lines  # the body itself is kept, line by line


def test_a_name_that_looks_like_an_option_stays_the_value_of_its_directive(world):
    job = prepared(world, name="--qos")
    assert "#SBATCH --job-name=--qos" in portal_header(job.rendered_script)
    assert all(not line.startswith("#SBATCH --qos") for line in job.rendered_script.split("\n"))


ACCEPTED_VALUES = [
    f"$(touch {CANARY})",
    f"`touch {CANARY}`",
    f"'; touch {CANARY}; '",
    f'"; touch {CANARY}; "',
    f"$'\\x27'; touch {CANARY}",
    "a;b|c&d>e<f",
    "\\",
    "$HOME ${PATH} $$ !! !-1",
    "café ✓ 東京",
    "=",
    "x=y=z",
    "'",
    "",
    " leading and trailing ",
    # sbatch's --export is given names only; a value's comma is no variable of its own.
    "a,LD_PRELOAD=/tmp/x.so",
    "eth0,eth1",
]


@pytest.mark.parametrize("value", ACCEPTED_VALUES)
def test_an_accepted_value_reaches_the_job_verbatim_and_runs_nothing(world, value, tmp_path):
    Path(CANARY).unlink(missing_ok=True)
    job = prepared(world, environment={"MSG": value}, script='printf "%s" "$MSG"\n')
    rendered = job.rendered_script
    assert directives_sbatch_reads(rendered) == portal_header(rendered)
    [export] = [line for line in rendered.split("\n") if line.startswith("export ")]
    assert export.startswith("export MSG='")  # single-quoted: bash expands nothing
    run = run_with_bash(rendered, tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout == value
    assert not Path(CANARY).exists()
    # And the same variables can be handed to sbatch's --export (the cli adapter).
    export_argument(submit_request_for(job).environment)


def test_the_api_estimate_shows_the_rendered_script_of_an_accepted_request(world):
    _, plain = token_create(user=world.alice, name="inject")
    client = Client(headers={"Authorization": f"Bearer {plain}"})
    body = {
        **base_request(world),
        "name": "--qos",
        "environment": {"MSG": f"$(touch {CANARY})"},
        "script": "echo '#SBATCH --qos=high' $HOME\n",
    }
    response = client.post("/api/v1/jobs/estimate/", body, content_type="application/json")
    assert response.status_code == 200, response.json()
    rendered = response.json()["rendered_script"]
    assert directives_sbatch_reads(rendered) == portal_header(rendered)
    assert f"export MSG='$(touch {CANARY})'" in rendered
    assert not Job.objects.exists()


# --- what sbatch itself reads -------------------------------------------------------------


@pytest.mark.slurm
@pytest.mark.parametrize(
    ("line", "is_directive"),
    [
        ("#SBATCH --time=99999:00:00", True),
        ("#SLURM --time=99999:00:00", True),
        ("#PBS -l walltime=99999:00:00", True),
        ("#BSUB -W 5999940", True),
        (" #SBATCH --time=99999:00:00", False),
        ("# SBATCH --time=99999:00:00", False),
        ("#sbatch --time=99999:00:00", False),
        ("\ufeff#SBATCH --time=99999:00:00", False),
        ("# c\r#SBATCH --time=99999:00:00", False),
    ],
)
def test_sbatch_itself_reads_these_lines(slurm_stack, tmp_path, line, is_directive):
    """Keeps ``directives_sbatch_reads`` honest: a time limit far over the debug
    partition's is refused only if sbatch took the line as a directive."""
    script = f"#!/bin/bash\n#SBATCH --partition=debug\n\n# a comment\n\n{line}\necho hi\n"
    path = tmp_path / "job.sh"
    path.write_text(script)
    run = subprocess.run(
        ["sbatch", "--test-only", str(path)], capture_output=True, text=True, timeout=60
    )
    refused = "time limit" in run.stderr.lower()
    assert refused is is_directive, run.stderr
    assert (line in directives_sbatch_reads(script)) is is_directive
