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
