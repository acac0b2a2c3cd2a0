"""English and Japanese: the catalogue is complete and current, pages follow the browser's
language or the switch, and messages built by the services arrive translated."""

import gettext
import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.utils import translation

from accounts.services import membership_set, project_create
from tests.conftest import REPO

CATALOGUE = REPO / "locale" / "ja" / "LC_MESSAGES" / "django.po"
COMPILED = CATALOGUE.with_suffix(".mo")


@pytest.fixture(autouse=True)
def _no_language_left_active():
    # LocaleMiddleware activates the request's language in this thread and leaves it
    # there; later tests that call services directly expect the default, English.
    yield
    translation.deactivate()


def _unquote(line: str) -> str:
    text = line[line.index('"') + 1 : line.rindex('"')]
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m[1], m[1]), text)


def msgids(po: Path) -> set[tuple[str, str]]:
    """The (msgctxt, msgid) of every entry of a .po file, obsolete ones left out."""
    found, entry, key = set(), {"msgctxt": "", "msgid": ""}, ""
    for line in [*po.read_text(encoding="utf-8").splitlines(), ""]:
        if not line.strip():
            if entry["msgid"]:
                found.add((entry["msgctxt"], entry["msgid"]))
            entry, key = {"msgctxt": "", "msgid": ""}, ""
        elif line.startswith(("msgctxt ", "msgid ")):
            key = line.split(" ", 1)[0]
            entry[key] = _unquote(line)
        elif line.startswith("msgid_plural") or line.startswith("msgstr"):
            key = ""
        elif line.startswith('"') and key:
            entry[key] += _unquote(line)
    return found


def msgfmt(po: Path, mo: Path) -> str:
    """Compile with the same format checks as compilemessages; msgfmt's statistics."""
    result = subprocess.run(
        ["msgfmt", "--check", "--statistics", "-o", str(mo), str(po)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stderr


def test_every_japanese_entry_is_translated_and_compiles(tmp_path):
    statistics = msgfmt(CATALOGUE, tmp_path / "django.mo")
    assert re.fullmatch(r"\d+ translated messages?\.\n", statistics), statistics
    assert "#, fuzzy" not in CATALOGUE.read_text(encoding="utf-8")


def test_the_catalogue_has_every_string_of_the_code_and_templates_and_no_other(tmp_path):
    """`make messages` run on a copy of the project finds exactly the catalogue's entries.

    A copy, because makemessages writes into the project it runs in: the repository's
    catalogue is only read here (and checked to be unchanged afterwards).
    """
    copy = tmp_path / "project"
    shutil.copytree(
        REPO,
        copy,
        ignore=shutil.ignore_patterns(".*", "__pycache__", "*.egg-info", "var", "bench", "tests"),
    )
    makefile = (REPO / "Makefile").read_text().replace("\\\n", " ")
    command = re.search(r"^MAKEMESSAGES := (.+)$", makefile, re.MULTILINE)
    assert command, "the Makefile defines MAKEMESSAGES for `make messages`"
    before = hashlib.sha256(CATALOGUE.read_bytes()).hexdigest()

    result = subprocess.run(
        [sys.executable, *command[1].split()], cwd=copy, capture_output=True, text=True
    )

    assert result.returncode == 0, result.stderr
    assert hashlib.sha256(CATALOGUE.read_bytes()).hexdigest() == before
    refreshed = msgids(copy / CATALOGUE.relative_to(REPO))
    current = msgids(CATALOGUE)
    assert not refreshed - current, "new strings: run `make messages` and translate them"
    assert not current - refreshed, "strings no longer used: run `make messages`"


def test_the_compiled_catalogue_is_the_current_one(tmp_path):
    assert COMPILED.exists(), "compile the catalogue: `make compilemessages`"
    msgfmt(CATALOGUE, tmp_path / "django.mo")
    with COMPILED.open("rb") as compiled, (tmp_path / "django.mo").open("rb") as fresh:
        stale = (
            gettext.GNUTranslations(compiled)._catalog != gettext.GNUTranslations(fresh)._catalog
        )
    assert not stale, "locale/ja/LC_MESSAGES/django.mo is stale: `make compilemessages`"


def test_the_login_page_follows_the_browsers_language(client, db):
    japanese = client.get("/login/", HTTP_ACCEPT_LANGUAGE="ja,en;q=0.5").content.decode()
    english = client.get("/login/", HTTP_ACCEPT_LANGUAGE="en-GB,en;q=0.8").content.decode()

    assert '<html lang="ja">' in japanese and "<h1>ログイン</h1>" in japanese
    assert "ユーザー名" in japanese  # Django's own catalogue, for the form's labels
    assert '<html lang="en">' in english and "<h1>Log in</h1>" in english


@pytest.fixture
def vision(alice):
    project = project_create(slug="vision", name="Vision Lab", slurm_account="vision")
    membership_set(project=project, user=alice, role="pi")
    return project


def test_the_dashboard_is_in_japanese_for_a_japanese_browser(client, alice, vision):
    client.force_login(alice)
    html = client.get("/", HTTP_ACCEPT_LANGUAGE="ja").content.decode()

    assert '<html lang="ja">' in html
    assert "<h1>ダッシュボード</h1>" in html
    assert "有効な割り当てはありません。" in html and "GPU時間を申請" in html
    assert "Dashboard" not in html and "No active allocation." not in html
    # The switch names each language in that language.
    assert '<option value="ja" lang="ja" selected>日本語</option>' in html
    assert '<option value="en" lang="en">English</option>' in html


def test_the_language_chosen_with_the_switch_sticks(client, alice, vision):
    client.force_login(alice)
    switched = client.post("/i18n/setlang/", {"language": "ja", "next": "/jobs/"})
    assert switched.status_code == 302 and switched["Location"] == "/jobs/"

    # The choice outweighs the browser's language, on every later page.
    for url in ("/", "/jobs/", f"/projects/{vision.slug}/"):
        html = client.get(url, HTTP_ACCEPT_LANGUAGE="en").content.decode()
        assert '<html lang="ja">' in html, url
    assert "<h1>ジョブ</h1>" in client.get("/jobs/").content.decode()

    client.post("/i18n/setlang/", {"language": "en", "next": "/"})
    assert "<h1>Dashboard</h1>" in client.get("/", HTTP_ACCEPT_LANGUAGE="ja").content.decode()


def composer_form(project, **fields):
    return {
        "project": project.slug,
        "partition": "debug",
        "name": "i18n",
        "nodes": "1",
        "gpus_per_node": "1",
        "time_limit_minutes": "5",
        "script": "echo hi\n",
        **fields,
    }


@pytest.mark.slurm
def test_the_composer_and_its_errors_are_in_japanese(client, alice, make_project):
    project = make_project(members={alice: "pi"}, in_slurm=False)
    client.force_login(alice)

    page = client.get("/jobs/new/", HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    assert '<html lang="ja">' in page and "<h1>新しいジョブ</h1>" in page
    assert "GPUあたりのCPU数" in page and "ジョブを投入" in page

    preview = client.post(
        "/jobs/new/preview/",
        composer_form(project, script="#SBATCH --x\necho hi\n"),
        HTTP_ACCEPT_LANGUAGE="ja",
    )
    html = preview.content.decode()
    assert preview.status_code == 200
    assert "スクリプトに#SBATCH行は書けません" in html  # jobs.specs, via JobInvalid
    assert "may not contain #SBATCH" not in html

    english = client.post(
        "/jobs/new/preview/",
        composer_form(project, script="#SBATCH --x\necho hi\n"),
        HTTP_ACCEPT_LANGUAGE="en",
    ).content.decode()
    assert "Line 1: the script may not contain #SBATCH lines" in english


@pytest.mark.slurm
def test_dates_and_numbers_on_the_dashboard_follow_the_language(client, alice, make_project):
    project = make_project(members={alice: "pi"}, gpu_hours=1500, in_slurm=False)
    starts_on = project.allocations.get().starts_on
    client.force_login(alice)

    japanese = client.get("/", HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    english = client.get("/", HTTP_ACCEPT_LANGUAGE="en").content.decode()

    assert "1,500 GPU時間" in japanese and f"{starts_on:%Y/%m/%d}" in japanese
    assert "1,500 GPU-h" in english and f"{starts_on:%m/%d/%Y}" in english
