"""Reading a job's stdout/stderr without showing anything its owner could not read.

This runs in a worker (``read_output_of``, behind ``jobs.tasks.job_output_task``): the
web tier cannot read a user's files at all. The worker reads as itself (often root),
so it checks what it opened rather than what the path said: the folder is opened
first and its real location (after every symlink) must be inside the owner's roots;
the file is then opened inside that folder without following a symlink, and must be a
regular file owned by the owner. A symlink swapped in between the check and the
open cannot redirect the read.
"""

import errno
import os
import pwd
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.utils.translation import gettext as _

from accounts.posix import posix_login_refusal
from jobs.errors import OutputUnavailable
from jobs.paths import allowed_roots, is_inside

# What Slurm writes for %a when the job is not an array (its NO_VAL).
_NO_ARRAY_TASK = 4294967294
_PATTERN = re.compile(r"%(.)", re.DOTALL)


@dataclass(frozen=True)
class OutputText:
    text: str
    size_bytes: int  # the whole file's size, however much of it ``text`` shows
    truncated: bool  # ``text`` is not the whole file


def expand_output_pattern(
    path: str,
    *,
    job_id: int,
    array_job_id: int | None,
    array_task: int | None,
    name: str,
    user: str,
    node: str | None = None,
) -> str:
    """``path`` with Slurm's filename patterns replaced, as Slurm replaces them.

    %A is the array's job id, or the job id for a single job, and %a is Slurm's
    4294967294 for a single job (slurmd's own expansion). %N is the short name
    of the job's first node: pass ``node`` (sacct's BatchHost) to expand it;
    without it the path cannot be known, and OutputUnavailable says so.
    Patterns the portal never accepts are left as written, as Slurm leaves
    unknown ones.
    """

    def replace(match: re.Match[str]) -> str:
        code = match[1]
        if code == "N" and node is None:
            raise OutputUnavailable(
                _(
                    "The output path uses %(pattern)s (the node name), and the portal does not "
                    "know which node ran the job yet."
                )
                % {"pattern": "%N"}
            )
        values = {
            "%": "%",
            "j": str(job_id),
            "A": str(array_job_id if array_job_id is not None else job_id),
            "a": str(array_task if array_task is not None else _NO_ARRAY_TASK),
            "x": name,
            "u": user,
            "N": node or "",
        }
        return values.get(code, match[0])

    return _PATTERN.sub(replace, path)


def _open_folder(folder: str, roots: list[Path]) -> int:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise OutputUnavailable(
            _("%(folder)s does not exist yet: the job has not written it.") % {"folder": folder}
        ) from None
    except OSError as error:
        raise OutputUnavailable(
            _("The folder %(folder)s cannot be opened (%(error)s).")
            % {"folder": folder, "error": error.strerror}
        ) from None
    # The folder actually opened, whatever symlinks led to it (Linux's
    # /proc); elsewhere realpath, which a racing symlink swap could fool.
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        real = os.path.realpath(folder)
    if not is_inside(real, roots):
        os.close(fd)
        raise OutputUnavailable(
            _("%(folder)s is outside the owner's allowed folders; the portal does not show it.")
            % {"folder": folder}
        )
    return fd


def _not_written(path: str) -> str:
    return _("The job has not written %(path)s yet.") % {"path": path}


def _symbolic_link(path: str) -> str:
    return _("%(path)s is a symbolic link; the portal only shows plain files.") % {"path": path}


def _not_regular(path: str) -> str:
    return _("%(path)s is not a regular file; the portal only shows plain files.") % {"path": path}


def _open_file(
    name: str, *, folder_fd: int, path: str, owner_uid: int
) -> tuple[int, os.stat_result]:
    # A look before opening: opening a FIFO or a device can block or have
    # side effects (a tape rewinds), so those are never opened at all.
    try:
        before = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        raise OutputUnavailable(_not_written(path)) from None
    if stat.S_ISLNK(before.st_mode):
        raise OutputUnavailable(_symbolic_link(path))
    if not stat.S_ISREG(before.st_mode):
        raise OutputUnavailable(_not_regular(path))
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=folder_fd)
    except FileNotFoundError:
        raise OutputUnavailable(_not_written(path)) from None
    except OSError as error:
        if error.errno == errno.ELOOP:  # swapped for a symlink since the look
            raise OutputUnavailable(_symbolic_link(path)) from None
        raise OutputUnavailable(
            _("%(path)s cannot be read (%(error)s).") % {"path": path, "error": error.strerror}
        ) from None
    # What was opened is what counts: it may have been swapped since the look.
    opened = os.fstat(fd)
    if not stat.S_ISREG(opened.st_mode):
        os.close(fd)
        raise OutputUnavailable(_not_regular(path))
    if opened.st_uid != owner_uid:
        os.close(fd)
        raise OutputUnavailable(
            _("%(path)s belongs to another user; it is not yours to read.") % {"path": path}
        )
    return fd, opened


def _last_lines(text: str, count: int) -> str:
    # Lines end at "\n" only: progress bars redraw with "\r" on one line.
    ends_with_newline = text.endswith("\n")
    lines = text.split("\n")
    if ends_with_newline:
        lines.pop()
    kept = lines[-count:] if count else []
    return "\n".join(kept) + ("\n" if kept and ends_with_newline else "")


def read_output(
    path: str,
    *,
    owner_uid: int,
    roots: list[Path],
    tail_lines: int | None = None,
    max_bytes: int = 1_000_000,
) -> OutputText:
    """The end of the job output file at ``path`` (expanded), or OutputUnavailable saying why.

    At most the last ``max_bytes`` are read; then the first, partial line is
    dropped. ``tail_lines`` keeps only the last that many lines.
    """
    if tail_lines is not None and tail_lines < 0:
        raise ValueError("tail_lines cannot be negative")
    if not os.path.isabs(path) or "\x00" in path:
        raise OutputUnavailable(_("%(path)s is not an absolute path.") % {"path": repr(path)})
    folder, name = os.path.split(os.path.normpath(path))
    folder_fd = _open_folder(folder, roots)
    try:
        fd, info = _open_file(name, folder_fd=folder_fd, path=path, owner_uid=owner_uid)
    finally:
        os.close(folder_fd)
    try:
        start = max(0, info.st_size - max_bytes)
        # One pread: a regular file returns all of it (a file cut short
        # since the fstat returns less, which is fine).
        data = os.pread(fd, info.st_size - start, start)
    finally:
        os.close(fd)
    text = data.decode("utf-8", errors="replace")
    truncated = start > 0
    if truncated and "\n" in text:
        text = text.split("\n", 1)[1]
    if tail_lines is not None:
        shown = _last_lines(text, tail_lines)
        truncated = truncated or shown != text
        text = shown
    return OutputText(text=text, size_bytes=info.st_size, truncated=truncated)


def read_output_of(posix_user: str, path: str, *, tail_lines: int | None = None) -> OutputText:
    """The end of ``path`` (expanded) if it is ``posix_user``'s to read, as ``read_output``
    decides: inside the login's allowed roots, a regular file the login owns. Never for
    root or a system account, whoever asks."""
    try:
        owner_uid = pwd.getpwnam(posix_user).pw_uid
    except (KeyError, ValueError):  # ValueError: a NUL in the name
        raise OutputUnavailable(
            _("The Unix login %(login)s no longer exists.") % {"login": posix_user}
        ) from None
    if refusal := posix_login_refusal(posix_user):
        raise OutputUnavailable(refusal)
    return read_output(
        path,
        owner_uid=owner_uid,
        roots=allowed_roots(posix_user, settings.JOB_ROOTS),
        tail_lines=tail_lines,
        max_bytes=settings.JOB_OUTPUT_MAX_BYTES,
    )
