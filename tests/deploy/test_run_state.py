"""Where deploy/'s services keep their state and logs (issue 34, item 5): what a service
loads (beat's schedule is a pickle) or acts on is its own user's alone to write, and
what it logs (the access log holds OpenID authorisation codes) no other user's to read.

systemd makes each State/RuntimeDirectory with the unit's user as owner and the mode
the unit names; the logs go to the journal, which only root and the adm and
systemd-journal groups read."""

import re
from pathlib import Path

import pytest

from tests.deploy.installed import UNITS, exec_start, unit_settings

GUNICORN_CONF = Path(__file__).resolve().parents[2] / "deploy" / "gunicorn.conf.py"


@pytest.mark.parametrize("component", sorted(UNITS))
def test_a_service_s_folders_are_its_user_s_alone_to_write(component):
    settings = unit_settings(UNITS[component].read_text())
    assert settings["User"][-1] not in ("", "root"), "a service of its own user"
    for kind in ("State", "Runtime"):
        folders = settings.get(f"{kind}Directory", [])
        if folders:
            (mode,) = settings[f"{kind}DirectoryMode"]
            assert not int(mode, 8) & 0o027, f"{kind}DirectoryMode={mode}"
    (umask,) = settings["UMask"]
    assert int(umask, 8) & 0o027 == 0o027, f"UMask={umask}: files others could read or write"
    # No pid file: systemd tracks the process, and nothing kills by a file's word.
    assert "PIDFile" not in settings
    assert not {"--pidfile", "--pid", "--logfile", "--detach"} & set(
        exec_start(UNITS[component].read_text())
    )


def test_beat_keeps_its_schedule_in_its_own_state_folder():
    text = UNITS["beat"].read_text()
    settings = unit_settings(text)
    (folder,) = settings["StateDirectory"]
    command = exec_start(text)
    schedule = command[command.index("--schedule") + 1]
    assert schedule.startswith(f"/var/lib/{folder}/"), schedule


@pytest.mark.parametrize("component", sorted(UNITS))
def test_a_service_logs_to_the_journal(component):
    settings = unit_settings(UNITS[component].read_text())
    for stream in ("StandardOutput", "StandardError"):
        assert settings.get(stream, ["journal"])[-1] in ("journal", "inherit"), stream


def test_gunicorn_s_access_and_error_logs_go_to_the_journal():
    conf = GUNICORN_CONF.read_text()
    assert re.search(r'^accesslog = "-"$', conf, re.MULTILINE)
    assert re.search(r'^errorlog = "-"$', conf, re.MULTILINE)
