"""The dev stack leaks no secret to the machine's other users (issue 34, item 5).

Every local user reads every process's command line (``/proc/PID/cmdline``: no
``hidepid`` here, nor at many sites), so a password given as an argument is theirs for
as long as the command runs; a process's environment (``/proc/PID/environ``) is its
owner's alone. A watcher running as alice, a researcher with a login on this host,
reads every new process's command line while ``dev/stack start`` runs and restarts
daemons, and none may hold any of the stack's secrets. The files that name what root
kills or loads (pid files, beat's schedule) are root's to write, and the portal's logs
are no other user's to read.
"""

import json
import os
import pwd
import signal
import stat
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.slurm, pytest.mark.exclusive]

STACK = str(REPO / "dev" / "stack")
STACK_DIR = Path(os.environ.get("PORTAL_STACK_DIR", "/var/lib/slurm-gpu-portal"))
SECRETS = STACK_DIR / "secrets"
WATCHER_USER = "alice"
# Daemons whose start reads a secret: slurmdbd (its database's password), slapd (the
# directory's admin password, its seed's binds).
RESTARTED = ("slurmdbd", "slapd")

# Run as alice with Debian's python3 (the test's virtualenv is not hers to read). The
# kernel's newest pid (/proc/loadavg's last field) says which processes are new, so a
# command that lives a millisecond (sed, redis-cli) is still read; a full pass over
# /proc now and then catches the rest. On TERM it prints each command line it saw.
WATCHER = r"""
import json, os, signal, sys
stopped = False
def stop(*_):
    global stopped
    stopped = True
signal.signal(signal.SIGTERM, stop)
seen = set()
def read(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            line = f.read()
    except OSError:
        return
    if line:
        seen.add(line.replace(b"\0", b" ").decode(errors="replace"))
def newest():
    with open("/proc/loadavg", "rb") as f:
        return int(f.read().split()[4])
last = newest()
print("watching", flush=True)
rounds = 0
while not stopped:
    rounds += 1
    now = newest()
    for pid in range(max(now - 64, last + 1 if now > last else 1), now + 1):
        read(pid)
    for pid in range(now - 4, now + 1):
        read(pid)
    last = now
    if rounds % 2000 == 0:
        for name in os.listdir("/proc"):
            if name.isdigit():
                read(name)
json.dump(sorted(seen), sys.stdout)
"""


def secrets() -> dict[str, str]:
    """Every password the stack made, by name (read as root)."""
    return {
        path.name: path.read_text().strip()
        for path in sorted(SECRETS.iterdir())
        if path.is_file() and path.read_text().strip()
    }


def stack(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([STACK, *args], capture_output=True, text=True, check=False, timeout=600)


class Watcher:
    """The command lines alice saw while the block ran."""

    def __enter__(self) -> "Watcher":
        self.process = subprocess.Popen(
            ["runuser", "-u", WATCHER_USER, "--", "/usr/bin/python3", "-c", WATCHER],
            stdout=subprocess.PIPE,
            text=True,
            cwd="/",
        )
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "watching"
        self.seen: list[str] = []
        return self

    def __exit__(self, *exc) -> None:
        # runuser passes the TERM on to the watcher.
        self.process.send_signal(signal.SIGTERM)
        out, _ = self.process.communicate(timeout=30)
        self.seen = json.loads(out)


def leaks(seen: list[str], known: dict[str, str]) -> list[str]:
    """Each command line that holds a secret, the secret masked, with its name."""
    found = []
    for line in seen:
        for name, value in known.items():
            if value in line:
                found.append(f"{name}: {line.replace(value, '<' + name + '>')[:300]}")
    return found


def test_no_command_line_of_the_stack_holds_a_secret_while_it_starts_and_restarts():
    before = secrets()
    assert {"redis", "postgres", "portal-db", "slurmdbd-db", "ldap-admin"} <= set(before)
    marker = f"canary-{uuid.uuid4().hex}"
    with Watcher() as watcher:
        started = stack("start")
        assert started.returncode == 0, started.stdout + started.stderr
        for name in RESTARTED:
            stopped = stack("stop", name)
            assert stopped.returncode == 0, stopped.stdout + stopped.stderr
            restarted = stack("start", name)
            assert restarted.returncode == 0, restarted.stdout + restarted.stderr
        # Commands that live about as long as sed or redis-cli: alice must see them, or
        # the watcher proves nothing.
        for _ in range(20):
            subprocess.run(["/bin/true", marker], check=True)
            time.sleep(0.01)
    assert any(marker in line for line in watcher.seen), "the watcher saw no short command"
    assert any(line.startswith("sed ") for line in watcher.seen), "it saw no render"
    assert secrets() == before  # the same passwords: nothing was made again
    assert leaks(watcher.seen, before) == []


def owner_and_mode(path: Path) -> tuple[str, int]:
    info = path.stat()
    return pwd.getpwuid(info.st_uid).pw_name, stat.S_IMODE(info.st_mode)


def test_the_files_that_root_kills_or_loads_by_are_root_s_to_write():
    """Slurm's and the stack's pid files, and the portal's (dev/portal: pid files and
    beat's schedule, a pickle) in a folder of their own: a folder of SlurmUser's would let
    that user swap a file for a link root writes through, or name a pid root kills."""
    started = stack("start")
    assert started.returncode == 0, started.stdout + started.stderr
    folders = [STACK_DIR / "run", STACK_DIR / "portal"]
    for folder in (f for f in folders if f.exists()):  # the portal's once it ran here
        assert owner_and_mode(folder) == ("root", 0o755), folder
        for path in folder.iterdir():
            owner, mode = owner_and_mode(path)
            assert not mode & 0o022, f"{path} is writable by others ({oct(mode)})"
            if folder.name == "portal":
                assert owner == "root", path
