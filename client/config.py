"""Where the client keeps the portal's URL and the token: one JSON file, mode 0600.

``~/.config/sgp/config.json`` (``$XDG_CONFIG_HOME/sgp/config.json``, or the
file ``SGP_CONFIG`` names); ``SGP_URL`` and ``SGP_TOKEN`` override what it holds,
so a CI job needs no file at all.
"""

import json
import os
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit


class NotLoggedIn(Exception):
    """No usable URL or token: the message says how to log in."""


@dataclass(frozen=True)
class Login:
    url: str
    token: str


def config_path(env: Mapping[str, str] = os.environ) -> Path:
    if env.get("SGP_CONFIG"):
        return Path(env["SGP_CONFIG"])
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "sgp" / "config.json"


def normal_url(url: str) -> str:
    """The portal's root URL, without a trailing slash or /api/v1; ValueError if not http(s)."""
    url = url.strip().rstrip("/")
    if url.endswith("/api/v1"):
        url = url.removesuffix("/api/v1")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(
            f"{url!r} is not the portal's address; give e.g. https://portal.example.org"
        )
    return url


def read_config(path: Path) -> dict[str, str]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise NotLoggedIn(f"{path} is not valid JSON ({error}); run `sgp login` again.") from None
    if not isinstance(data, dict):
        raise NotLoggedIn(f"{path} does not hold a login; run `sgp login` again.")
    if stat.S_IMODE(path.stat().st_mode) & 0o077:
        print(f"sgp: warning: {path} can be read by others; `chmod 600 {path}`", file=sys.stderr)
    return {key: value for key, value in data.items() if isinstance(value, str)}


def write_config(path: Path, *, url: str, token: str) -> None:
    """Replace the file in one step, created 0600 so the token is never readable by others."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(descriptor, "w") as file:
            json.dump({"url": url, "token": token}, file, indent=2)
            file.write("\n")
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o600)  # O_CREAT's mode does not apply to a file left over
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def stored_url(env: Mapping[str, str] = os.environ) -> str | None:
    return env.get("SGP_URL") or read_config(config_path(env)).get("url")


def current_login(env: Mapping[str, str] = os.environ) -> Login:
    """The URL and token to call with: the environment's, else the config file's."""
    stored = read_config(config_path(env))
    url = env.get("SGP_URL") or stored.get("url")
    token = env.get("SGP_TOKEN") or stored.get("token")
    if not url or not token:
        raise NotLoggedIn(
            "Not logged in: run `sgp login --url URL` (or set SGP_URL and SGP_TOKEN)."
        )
    try:
        return Login(url=normal_url(url), token=token.strip())
    except ValueError as error:
        raise NotLoggedIn(f"{error} (SGP_URL or {config_path(env)}).") from None
