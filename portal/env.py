"""Typed readers for environment variables that fail loudly on a bad value.

Every setting of the portal is read through these helpers, so a malformed value
stops the process at start-up with a message that names the variable and says
what was expected, instead of surfacing later as a confusing runtime error.
A secret may also be given as ``<NAME>_FILE``: the path of a file holding it.
"""

import os
from pathlib import Path
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

_MISSING = object()
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _raw(name: str, default: object) -> str | object:
    file_name = os.environ.get(f"{name}_FILE")
    if file_name:
        try:
            return Path(file_name).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(
                f"{name}_FILE={file_name!r}: cannot read the file ({exc.strerror})."
            ) from exc
    value = os.environ.get(name)
    if value is None or value == "":
        if default is _MISSING:
            raise ImproperlyConfigured(f"{name} is not set; it is required.")
        return default
    return value


def env_str(name: str, default: str | object = _MISSING) -> str:
    return _raw(name, default)  # type: ignore[return-value]


def env_bool(name: str, default: bool | object = _MISSING) -> bool:
    value = _raw(name, default)
    if isinstance(value, bool):
        return value
    lowered = str(value).strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(
        f"{name}={value!r} is not a boolean; use one of 1/0, true/false, yes/no, on/off."
    )


def env_int(
    name: str,
    default: int | object = _MISSING,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    value = _raw(name, default)
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        try:
            number = int(str(value).strip())
        except ValueError:
            raise ImproperlyConfigured(f"{name}={value!r} is not a whole number.") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} is too small; the minimum is {minimum}.")
    if maximum is not None and number > maximum:
        raise ImproperlyConfigured(f"{name}={number} is too large; the maximum is {maximum}.")
    return number


def env_list(name: str, default: list[str] | object = _MISSING) -> list[str]:
    """A comma-separated list; blanks around items are ignored, empty items refused."""
    value = _raw(name, default)
    if isinstance(value, list):
        return value
    items = [item.strip() for item in str(value).split(",")]
    if any(not item for item in items):
        raise ImproperlyConfigured(
            f"{name}={value!r} has an empty item; separate items with single commas."
        )
    return items


def env_url(name: str, default: str | object = _MISSING, *, schemes: tuple[str, ...]) -> str:
    value = str(_raw(name, default))
    parts = urlsplit(value)
    if parts.scheme not in schemes or not parts.netloc:
        allowed = ", ".join(f"{scheme}://" for scheme in schemes)
        raise ImproperlyConfigured(
            f"{name}={_redact(value)!r} is not a URL of the form {allowed}host[:port]/..."
        )
    try:
        parts.port  # noqa: B018 - parsing the port validates it
    except ValueError:
        raise ImproperlyConfigured(f"{name}={_redact(value)!r} has an invalid port.") from None
    return value


def database_from_url(name: str, url: str) -> dict:
    """Django DATABASES entry for a ``postgresql://user:pass@host:port/db`` URL."""
    parts = urlsplit(url)
    database = parts.path.lstrip("/")
    if not database:
        raise ImproperlyConfigured(f"{name}={_redact(url)!r} names no database after the host.")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": database,
        "USER": parts.username or "",
        "PASSWORD": parts.password or "",
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@")
    return url
