"""Where a job may work and write: the owner's allowed roots, and path checks against them.

A path is checked twice over: lexically (strict characters, absolute, no ``..``)
and physically (the real location of its longest existing prefix, with every
symlink resolved, must lie inside a root). The second check is what stops a
symlink inside the home folder that points at ``/etc``.
"""

import os
import posixpath
import pwd
import re
from collections.abc import Iterable
from pathlib import Path

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from jobs.errors import JobInvalid

MAX_PATH_LENGTH = 1024

# Letters, digits and a few punctuation marks that need no quoting in an
# #SBATCH line or a shell, and cannot start an option or a substitution.
_PATH_CHARACTERS = re.compile(r"[A-Za-z0-9/._+@=,-]")
# Slurm's filename patterns that the portal knows how to expand when it reads
# the output back (jobs/output.py). Slurm's padding (%4j) and the per-step
# ones (%s, %t, %n, %J) are left out: they are not one file per job.
OUTPUT_PATTERNS = frozenset("jAaxuN%")
_CHARACTER_NAMES = {
    " ": gettext_lazy("a space"),
    "\n": gettext_lazy("a newline"),
    "\r": gettext_lazy("a carriage return"),
    "\t": gettext_lazy("a tab"),
}


def describe_character(char: str) -> str:
    """A character as a user can read it in a message (spaces and newlines are invisible)."""
    return str(_CHARACTER_NAMES.get(char, repr(char)))


def path_character_error(path: str, *, patterns: bool) -> str | None:
    """Why ``path`` has a character it may not have, or None; ``patterns`` allows %j etc."""
    index = 0
    while index < len(path):
        char = path[index]
        if char == "%" and patterns:
            code = path[index + 1 : index + 2]
            if code not in OUTPUT_PATTERNS:
                return _(
                    "'%(pattern)s' is not a filename pattern the portal supports; "
                    "use %%j, %%A, %%a, %%x, %%u, %%N or %%%% (a literal %%)."
                ) % {"pattern": "%" + code}
            index += 2
            continue
        if not _PATH_CHARACTERS.fullmatch(char):
            where = {"character": describe_character(char), "position": index + 1}
            if patterns:
                return (
                    _(
                        "It contains %(character)s at position %(position)s; paths may only use "
                        "letters, digits and / . _ - + @ = , and Slurm's %%j-style patterns."
                    )
                    % where
                )
            return (
                _(
                    "It contains %(character)s at position %(position)s; paths may only use "
                    "letters, digits and / . _ - + @ = ,."
                )
                % where
            )
        index += 1
    return None


def allowed_roots(posix_user: str, templates: list[str]) -> list[Path]:
    """The folders ``posix_user`` may use, from templates such as ``{home}`` or ``/scratch/{user}``.

    Roots are returned with their own symlinks resolved, so that they compare
    with the resolved paths they must contain.
    """
    try:
        home = pwd.getpwnam(posix_user).pw_dir
    except (KeyError, ValueError):  # ValueError: a NUL in the name
        raise JobInvalid.one(
            "__all__",
            _(
                "The POSIX user '%(user)s' does not exist on the cluster; "
                "ask an administrator to create it or to correct your POSIX username."
            )
            % {"user": posix_user},
        ) from None
    roots: list[Path] = []
    for template in templates:
        # str.replace, not str.format: a template is configuration, and format
        # would also evaluate attribute lookups such as {home.__class__}.
        root = template.replace("{user}", posix_user).replace("{home}", home)
        if not root.startswith("/"):
            raise ValueError(f"allowed root template {template!r} does not give an absolute path")
        real = Path(os.path.realpath(root))
        if real not in roots:
            roots.append(real)
    return roots


def is_inside(path: str, roots: Iterable[Path]) -> bool:
    """Whether ``path`` (already resolved) is one of ``roots`` or below one of them."""
    return any(Path(path).is_relative_to(os.path.realpath(root)) for root in roots)


def _roots_text(roots: Iterable[Path]) -> str:
    return ", ".join(str(root) for root in roots) or _("none are configured")


def lexical_path_error(path: str, *, patterns: bool) -> str | None:
    """What is wrong with ``path`` as written (no filesystem access), or None.

    ``patterns`` allows Slurm's filename patterns, for output paths.
    """
    if not path:
        return _("Give an absolute path, starting with /.")
    if len(path) > MAX_PATH_LENGTH:
        return _("The path is %(length)s characters long; use at most %(max)s.") % {
            "length": len(path),
            "max": MAX_PATH_LENGTH,
        }
    if problem := path_character_error(path, patterns=patterns):
        return problem
    if not path.startswith("/"):
        return _("'%(path)s' is not an absolute path; start it with /.") % {"path": path}
    if ".." in path.split("/"):
        return _("'%(path)s' contains '..'; write the folder without going up a level.") % {
            "path": path
        }
    return None


def _checked(path: str, *, roots: Iterable[Path], field: str, patterns: bool) -> str:
    """The lexically normalised ``path`` after every check, or JobInvalid on ``field``."""
    roots = list(roots)
    if problem := lexical_path_error(path, patterns=patterns):
        raise JobInvalid.one(
            field,
            _("%(problem)s Allowed folders: %(roots)s.")
            % {"problem": problem, "roots": _roots_text(roots)},
        )
    # normpath keeps a leading "//" (POSIX lets it mean something else); collapse it.
    normal = "/" + posixpath.normpath(path).lstrip("/")
    # realpath resolves every existing component (and a dangling symlink's
    # target) and keeps the rest as written: the longest existing prefix.
    if not is_inside(os.path.realpath(normal), roots):
        raise JobInvalid.one(
            field,
            _(
                "'%(path)s' is outside your allowed folders (%(roots)s), or a symbolic link "
                "in it leads outside them; choose a path inside one of them."
            )
            % {"path": normal, "roots": _roots_text(roots)},
        )
    return normal


def check_directory(path: str, *, roots: Iterable[Path], field: str) -> str:
    """``path`` as a normalised absolute folder inside ``roots``, or JobInvalid on ``field``.

    The folder need not exist yet; if it does, it must be a folder.
    """
    normal = _checked(path, roots=roots, field=field, patterns=False)
    if os.path.exists(normal) and not os.path.isdir(normal):
        raise JobInvalid.one(
            field, _("'%(path)s' is a file, not a folder; choose a folder.") % {"path": normal}
        )
    return normal


def check_output_path(
    path: str, *, working_directory: str, roots: Iterable[Path], field: str
) -> str:
    """``path`` (absolute, or relative to ``working_directory``) normalised, or JobInvalid.

    Slurm's filename patterns (%j %A %a %x %u %N %%) are allowed and kept; the
    check applies to the path as written, and jobs/output.py checks the
    expanded path again when it reads the file.
    """
    if path and not path.startswith("/"):
        # Slurm resolves a relative --output against --chdir; do it here so
        # the directive is absolute and the check sees where it really goes.
        path = working_directory.rstrip("/") + "/" + path
    return _checked(path, roots=roots, field=field, patterns=True)
