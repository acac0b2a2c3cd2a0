"""System checks for the database and the broker (ids ``portal.E…``/``portal.W…``).

Configuration that cannot work is an Error and stops ``runserver``/``migrate``;
a service that is merely down right now is a Warning, so a deploy can still
run while, say, Redis restarts.
"""

from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DatabaseError, connections

from portal.health import broker_status


@register(Tags.database)
def check_database(app_configs, databases=None, **kwargs):
    if not databases:
        return []
    errors = []
    for alias in databases:
        connection = connections[alias]
        if connection.vendor != "postgresql":
            errors.append(
                Error(
                    f"Database {alias!r} uses {connection.vendor}; the portal needs PostgreSQL.",
                    hint="Set PORTAL_DATABASE_URL=postgresql://user:password@host:5432/name.",
                    id="portal.E001",
                )
            )
            continue
        try:
            connection.ensure_connection()
        except DatabaseError as exc:
            settings_dict = connection.settings_dict
            errors.append(
                Error(
                    f"Cannot connect to PostgreSQL database {settings_dict['NAME']!r} at "
                    f"{settings_dict['HOST']}:{settings_dict['PORT']}: {exc}".strip(),
                    hint="Check PORTAL_DATABASE_URL and that PostgreSQL is running "
                    "('dev/stack start postgresql' on a dev machine).",
                    id="portal.E002",
                )
            )
            continue
        with connection.cursor() as cursor:
            cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            row = cursor.fetchone()
        if row and row[0]:
            errors.append(
                Error(
                    f"The portal connects to PostgreSQL as the superuser "
                    f"{connection.settings_dict['USER']!r}.",
                    hint="Give it a role of its own that owns the portal's database and is no "
                    "superuser (CREATE ROLE portal LOGIN PASSWORD '…'; "
                    "ALTER DATABASE portal OWNER TO portal).",
                    id="portal.E005",
                )
            )
    return errors


@register()
def check_secrets(app_configs, **kwargs):
    """In production every service the portal uses is reached with a password: code
    inside a job may run on a host that reaches them (docs/DEPLOYMENT.md)."""
    if not settings.IS_PRODUCTION:
        return []
    errors: list[CheckMessage] = []
    if not settings.DATABASES["default"]["PASSWORD"]:
        errors.append(
            Error(
                "PostgreSQL is reached without a password.",
                hint="Set PORTAL_DATABASE_PASSWORD_FILE (or PORTAL_DATABASE_PASSWORD) to the "
                "password of the portal's own role, and make the server require it.",
                id="portal.E003",
            )
        )
    for name, url in (("broker", settings.CELERY_BROKER_URL), ("cache", settings.CACHE_URL)):
        if not urlsplit(url).password and not settings.REDIS_PASSWORD:
            errors.append(
                Error(
                    f"Redis ({name}) is reached without a password.",
                    hint="Set PORTAL_REDIS_PASSWORD_FILE (or PORTAL_REDIS_PASSWORD) and give "
                    "Redis the same password (requirepass, or an ACL user).",
                    id="portal.E004",
                )
            )
    return errors


@register()
def check_broker(app_configs, **kwargs):
    parts = urlsplit(settings.CELERY_BROKER_URL)
    errors: list[CheckMessage] = []
    database = parts.path.lstrip("/")
    if database and not database.isdigit():
        errors.append(
            Error(
                f"PORTAL_BROKER_URL selects Redis database {database!r}, which is not a number.",
                hint="Use e.g. redis://127.0.0.1:6379/0.",
                id="portal.E010",
            )
        )
        return errors
    status = broker_status()
    if not status["ok"]:
        errors.append(
            Warning(
                f"The Celery broker is not reachable: {status['error']}",
                hint="Check PORTAL_BROKER_URL and that Redis is running "
                "('dev/stack start redis' on a dev machine).",
                id="portal.W011",
            )
        )
    return errors
