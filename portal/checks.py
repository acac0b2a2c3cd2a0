"""System checks for the database and the broker (ids ``portal.E…``/``portal.W…``).

Configuration that cannot work is an Error and stops ``runserver``/``migrate``;
a service that is merely down right now is a Warning, so a deploy can still
run while, say, Redis restarts.
"""

import ipaddress
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DatabaseError, connections

from portal.health import broker_status
from portal.metric_files import ENV as METRICS_FOLDER_ENV
from portal.metric_files import own_folder


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


_LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


@register()
def check_metrics(app_configs, **kwargs):
    """Where this process's metrics go (portal/metric_files.py) and who may scrape them."""
    warnings: list[CheckMessage] = []
    own = own_folder()
    if settings.METRICS_DIR and own is not None:
        base = Path(settings.METRICS_DIR).resolve()
        if base != own.resolve() and base not in own.resolve().parents:
            warnings.append(
                Warning(
                    f"{METRICS_FOLDER_ENV}={own} is not inside PORTAL_METRICS_DIR="
                    f"{settings.METRICS_DIR}: this process's counts are missing from /metrics.",
                    hint="Give each service (the web server, each worker) a folder of its own "
                    f"inside it, e.g. {METRICS_FOLDER_ENV}=$PORTAL_METRICS_DIR/web.",
                    id="portal.W020",
                )
            )
    networks = [ipaddress.ip_network(network) for network in settings.METRICS_ALLOWED_NETWORKS]
    loopback = any(
        network.version == each.version and network.overlaps(each)
        for network in networks
        for each in _LOOPBACK
    )
    if settings.IS_PRODUCTION and loopback and not settings.PROXY_COUNT:
        warnings.append(
            Warning(
                "PORTAL_METRICS_ALLOWED_NETWORKS lets loopback addresses scrape /metrics while "
                "PORTAL_PROXY_COUNT is 0: behind a proxy on this host, every client comes "
                "from a loopback address.",
                hint="Set PORTAL_PROXY_COUNT to the number of proxies in front of the web "
                "process, or scrape with PORTAL_METRICS_TOKEN and list no loopback network.",
                id="portal.W021",
            )
        )
    return warnings
