"""The portal's only settings module: every value comes from the environment.

Production is the default: debug off, a secret key required, secure cookies.
Development is asked for with ``PORTAL_ENV=dev`` (``make``, ``dev/portal`` and the
tests do): it then points at the local stack that ``dev/stack`` starts (PostgreSQL
and Redis on 127.0.0.1, their passwords in the stack's secrets folder) and serves
loopback addresses only. In production set at least ``PORTAL_SECRET_KEY``,
``PORTAL_ALLOWED_HOSTS``, ``PORTAL_DATABASE_PASSWORD`` and ``PORTAL_REDIS_PASSWORD``
(each also as ``…_FILE``). The README lists every variable.
"""

import ipaddress
import re
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext_lazy as _

from portal.env import (
    database_from_url,
    env_bool,
    env_int,
    env_list,
    env_str,
    env_url,
)

BASE_DIR = Path(__file__).resolve().parent.parent

PORTAL_ENV = env_str("PORTAL_ENV", "production")
if PORTAL_ENV not in {"dev", "production"}:
    raise ImproperlyConfigured(f"PORTAL_ENV={PORTAL_ENV!r} must be 'dev' or 'production'.")
IS_PRODUCTION = PORTAL_ENV == "production"

DEBUG = env_bool("PORTAL_DEBUG", not IS_PRODUCTION)
# The dev key is public on purpose: it only ever signs sessions on a laptop, and
# production refuses it.
DEV_SECRET_KEY = "dev-only-insecure-key"  # noqa: S105 - public on purpose, refused below
SECRET_KEY = env_str("PORTAL_SECRET_KEY", DEV_SECRET_KEY if not IS_PRODUCTION else None)
if SECRET_KEY is None:
    raise ImproperlyConfigured("PORTAL_SECRET_KEY (or PORTAL_SECRET_KEY_FILE) is required.")
if IS_PRODUCTION and SECRET_KEY == DEV_SECRET_KEY:
    raise ImproperlyConfigured(
        "PORTAL_SECRET_KEY is the public development key; set a secret one of your own, "
        "e.g. from: python -c 'import secrets; print(secrets.token_urlsafe(50))'."
    )
ALLOWED_HOSTS = env_list("PORTAL_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("PORTAL_CSRF_TRUSTED_ORIGINS", [])


def _is_loopback(host: str) -> bool:
    name = host.strip().removeprefix("[").removesuffix("]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


# Dev mode runs with DEBUG and a public key: it must not be reachable from elsewhere.
if not IS_PRODUCTION:
    for _name, _hosts in (
        ("PORTAL_ALLOWED_HOSTS", ALLOWED_HOSTS),
        ("PORTAL_HTTP_HOST", [env_str("PORTAL_HTTP_HOST", "127.0.0.1")]),
    ):
        _public = [host for host in _hosts if not _is_loopback(host)]
        if _public:
            raise ImproperlyConfigured(
                f"{_name} names {', '.join(_public)}, which is not a loopback address; "
                "PORTAL_ENV=dev serves this machine only (debug on, a public key). "
                "Use PORTAL_ENV=production to serve others."
            )

# Dev mode finds the local stack's passwords where dev/stack keeps them.
STACK_DIR = Path(env_str("PORTAL_STACK_DIR", "/var/lib/slurm-gpu-portal"))
# Where the workers keep the lock files that serialise their changes to Slurm.
LOCK_DIR = Path(env_str("PORTAL_LOCK_DIR", str(STACK_DIR / "locks")))


def _secret(name: str, *, dev_file: str) -> str:
    """A password from ``name`` (or ``name``_FILE); in dev mode, by default, the one
    dev/stack made. Empty when there is none (``portal.E003`` says so in production)."""
    value = env_str(name, "")
    if value or IS_PRODUCTION:
        return value
    try:
        return (STACK_DIR / "secrets" / dev_file).read_text().strip()
    except OSError:
        return ""  # not made yet (dev/stack start makes it); connecting will say so


def _with_password(url: str, password: str) -> str:
    """``url`` with ``password`` in it, unless it carries one of its own."""
    parts = urlsplit(url)
    if not password or parts.password:
        return url
    user = quote(parts.username or "", safe="")
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:{quote(password, safe='')}@{host}"))


DATABASE_PASSWORD = _secret("PORTAL_DATABASE_PASSWORD", dev_file="portal-db")
REDIS_PASSWORD = _secret("PORTAL_REDIS_PASSWORD", dev_file="redis")

INSTALLED_APPS = [
    "portal.console.ConsoleAdminConfig",  # django.contrib.admin, refusing bad queries
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "audit",
    "clusters",
    "accounts",
    "jobs",
    "portal",
]

MIDDLEWARE = [
    # First, so every other middleware's log lines carry the request id too.
    "portal.logs.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Before whitenoise, so static files carry the CSP and CORP too.
    "portal.security.SecurityHeadersMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"
ASGI_APPLICATION = "portal.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASE_URL = env_url(
    "PORTAL_DATABASE_URL",
    "postgresql://portal@127.0.0.1:5432/portal",
    schemes=("postgresql", "postgres"),
)
DATABASES = {
    "default": {
        **database_from_url("PORTAL_DATABASE_URL", _with_password(DATABASE_URL, DATABASE_PASSWORD)),
        "CONN_MAX_AGE": env_int("PORTAL_DATABASE_CONN_MAX_AGE_S", 60, minimum=0),
        "CONN_HEALTH_CHECKS": True,
        "OPTIONS": {"connect_timeout": env_int("PORTAL_DATABASE_CONNECT_TIMEOUT_S", 5, minimum=1)},
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_USER_MODEL = "accounts.User"

CACHE_URL = env_url("PORTAL_CACHE_URL", "redis://127.0.0.1:6379/1", schemes=("redis", "rediss"))
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": _with_password(CACHE_URL, REDIS_PASSWORD),
        "OPTIONS": {
            # JSON, never pickle: a value read back from Redis must not be able to run code.
            "serializer": "portal.cache.JSONSerializer",
            "socket_connect_timeout": 2,
            "socket_timeout": 2,
        },
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en"
LANGUAGES = [("en", _("English")), ("ja", _("Japanese"))]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = env_str("PORTAL_TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env_str("PORTAL_STATIC_ROOT", str(BASE_DIR / "var" / "static")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if IS_PRODUCTION
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = not IS_PRODUCTION

# Security headers and cookies. The CSP and CORP come from portal/security.py; the
# rest are Django's own settings, so `manage.py check --deploy` sees them.
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
# Production is served over TLS only: cookies never travel in clear text.
SESSION_COOKIE_SECURE = IS_PRODUCTION
CSRF_COOKIE_SECURE = IS_PRODUCTION
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
SECURE_SSL_REDIRECT = env_bool("PORTAL_SECURE_SSL_REDIRECT", IS_PRODUCTION)
# A load balancer's health probe speaks plain HTTP to the web process, and so may a
# Prometheus server on the web hosts' private network (README "Metrics").
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]
SECURE_HSTS_SECONDS = env_int("PORTAL_HSTS_SECONDS", 31_536_000 if IS_PRODUCTION else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("PORTAL_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("PORTAL_HSTS_PRELOAD", False)
# Preloading commits the whole domain to HTTPS in every browser for months, a choice
# for the site's operators (PORTAL_HSTS_PRELOAD=on), not a default of the portal.
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]


def _proxy_ssl_header(name: str) -> tuple[str, str] | None:
    """``X-Forwarded-Proto`` (the proxy sends ``https``) or ``Header=value``; empty: none."""
    value = env_str(name, "").strip()
    if not value:
        return None
    header, _, expected = value.partition("=")
    if not re.fullmatch(r"[A-Za-z0-9-]+", header.strip()):
        raise ImproperlyConfigured(
            f"{name}={value!r} is not a header name, e.g. X-Forwarded-Proto or X-Forwarded-Ssl=on."
        )
    meta_name = "HTTP_" + header.strip().upper().replace("-", "_")
    return meta_name, expected.strip() or "https"


# Only behind a TLS-terminating proxy that sets this header on every request (and
# strips it from clients'): Django then trusts it to tell HTTPS from HTTP.
SECURE_PROXY_SSL_HEADER = _proxy_ssl_header("PORTAL_PROXY_SSL_HEADER")
# How many proxies in front of the web process append to X-Forwarded-For; the
# client's address is the one the outermost of them saw. 0: the connection's own
# address (a client-sent X-Forwarded-For is never trusted then).
PROXY_COUNT = env_int("PORTAL_PROXY_COUNT", 0, minimum=0)

# Web and admin log-in: after this many failures within the window, per user name
# or per client address (higher: many people may share one NAT), log-in is
# refused for the window, even with the right password.
LOGIN_MAX_FAILURES = env_int("PORTAL_LOGIN_MAX_FAILURES", 5, minimum=1)
LOGIN_MAX_FAILURES_PER_ADDRESS = env_int("PORTAL_LOGIN_MAX_FAILURES_PER_ADDRESS", 20, minimum=1)
LOGIN_WINDOW_S = env_int("PORTAL_LOGIN_WINDOW_S", 900, minimum=10)


# Sign-in with the site's identity (README "Signing in"). Each source is off until its
# URL is set (`off` switches a dev default off); the log-in page offers what is on.
# Whatever the source, the Unix login a user's jobs run as comes from the directory
# (an LDAP attribute) or the provider (a claim), checked by the workers where jobs are
# submitted: never typed by the user (accounts/identity.py).
def _off_or(name: str, dev_default: str) -> str:
    value = env_str(name, "" if IS_PRODUCTION else dev_default).strip()
    return "" if value.lower() == "off" else value


LDAP_URL = _off_or("PORTAL_LDAP_URL", "ldap://127.0.0.1:3389")
if LDAP_URL and not re.match(r"ldaps?://[^/]+/?$", LDAP_URL):
    raise ImproperlyConfigured(
        f"PORTAL_LDAP_URL={LDAP_URL!r} is not a directory's address; write "
        "ldap://host[:port] or ldaps://host[:port], or off."
    )
LDAP_BIND_DN = env_str("PORTAL_LDAP_BIND_DN", "cn=portal,ou=services,dc=portal,dc=test")
LDAP_BIND_PASSWORD = _secret("PORTAL_LDAP_BIND_PASSWORD", dev_file="ldap-portal")
LDAP_USER_BASE = env_str("PORTAL_LDAP_USER_BASE", "ou=people,dc=portal,dc=test")
LDAP_USER_FILTER = env_str("PORTAL_LDAP_USER_FILTER", "(objectClass=posixAccount)")
# What a person types at log-in, and where their Unix login is (often both uid).
LDAP_LOGIN_ATTRIBUTE = env_str("PORTAL_LDAP_LOGIN_ATTRIBUTE", "uid")
LDAP_POSIX_ATTRIBUTE = env_str("PORTAL_LDAP_POSIX_ATTRIBUTE", "uid")
LDAP_GROUP_BASE = env_str("PORTAL_LDAP_GROUP_BASE", "ou=groups,dc=portal,dc=test")
# A person's groups: {uid} is their Unix login, {dn} their entry (for groupOfNames).
LDAP_GROUP_FILTER = env_str(
    "PORTAL_LDAP_GROUP_FILTER", "(&(objectClass=posixGroup)(memberUid={uid}))"
)
LDAP_TIMEOUT_S = env_int("PORTAL_LDAP_TIMEOUT_S", 5, minimum=1)
LDAP_START_TLS = env_bool("PORTAL_LDAP_START_TLS", False)

OIDC_ISSUER = _off_or("PORTAL_OIDC_ISSUER", "http://127.0.0.1:9080").rstrip("/")
if OIDC_ISSUER and not re.match(r"https?://[^/]", OIDC_ISSUER):
    raise ImproperlyConfigured(
        f"PORTAL_OIDC_ISSUER={OIDC_ISSUER!r} is not a URL; write the provider's issuer, "
        "e.g. https://login.example.org/realms/hpc, or off."
    )
if IS_PRODUCTION and OIDC_ISSUER.startswith("http://"):
    raise ImproperlyConfigured(
        f"PORTAL_OIDC_ISSUER={OIDC_ISSUER!r} is plain HTTP; a provider is reached over HTTPS."
    )
OIDC_NAME = env_str("PORTAL_OIDC_NAME", "single sign-on")
OIDC_RP_CLIENT_ID = env_str("PORTAL_OIDC_CLIENT_ID", "slurm-gpu-portal")
OIDC_RP_CLIENT_SECRET = _secret("PORTAL_OIDC_CLIENT_SECRET", dev_file="oidc-client")
OIDC_RP_SCOPES = env_str(
    "PORTAL_OIDC_SCOPES", "openid email profile" + ("" if IS_PRODUCTION else " posix groups")
)
OIDC_POSIX_CLAIM = env_str("PORTAL_OIDC_POSIX_CLAIM", "uid")
OIDC_GROUPS_CLAIM = env_str("PORTAL_OIDC_GROUPS_CLAIM", "groups")
# With a directory too, a provider's user is looked up in it (claim=attribute) and the
# two must name the same Unix login; empty: looked up by the Unix login claim alone.
OIDC_DIRECTORY_MATCH = env_str("PORTAL_OIDC_DIRECTORY_MATCH", "email=mail").strip()
if OIDC_DIRECTORY_MATCH and not re.fullmatch(r"email=[A-Za-z][A-Za-z0-9-]*", OIDC_DIRECTORY_MATCH):
    raise ImproperlyConfigured(
        f"PORTAL_OIDC_DIRECTORY_MATCH={OIDC_DIRECTORY_MATCH!r}: write email=<attribute> (the "
        "provider's verified e-mail matched against that directory attribute, e.g. "
        "email=mail), or leave it empty to match the Unix login claim alone."
    )
# The command line's own client at the provider (public, device flow): `sgp login --sso`
# trades its ID token for a portal token. Empty: the command line signs in with tokens
# made in the browser only.
OIDC_CLI_CLIENT_ID = env_str("PORTAL_OIDC_CLI_CLIENT_ID", "" if IS_PRODUCTION else "sgp")
OIDC_RP_SIGN_ALGO = "RS256"
OIDC_USE_PKCE = True
OIDC_PKCE_CODE_CHALLENGE_METHOD = "S256"
OIDC_TIMEOUT = env_int("PORTAL_OIDC_TIMEOUT_S", 5, minimum=1)
OIDC_AUTHENTICATION_CALLBACK_URL = "oidc_callback"
LOGIN_REDIRECT_URL_FAILURE = "/login/"

# `superusers`: only a superuser (the break-glass administrator) may log in with a
# password kept by the portal; everyone else signs in through the directory or provider.
LOCAL_LOGIN = env_str("PORTAL_LOCAL_LOGIN", "on").strip().lower()
if LOCAL_LOGIN not in {"on", "superusers"}:
    raise ImproperlyConfigured(
        f"PORTAL_LOCAL_LOGIN={LOCAL_LOGIN!r}: write on (everyone with a portal password) "
        "or superusers (the break-glass administrator only)."
    )
AUTHENTICATION_BACKENDS = [
    *(["accounts.ldap_login.DirectoryBackend"] if LDAP_URL else []),
    *(["accounts.oidc.ProviderBackend"] if OIDC_ISSUER else []),
    "accounts.local_login.LocalBackend",
]


def _group_projects(name: str, default: str) -> list[tuple[str, str, str]]:
    """``group=project:role`` items, comma-separated: (group, project slug, role)."""
    value = env_str(name, default).strip()
    if not value or value.lower() == "off":
        return []
    mapping = []
    for item in value.split(","):
        found = re.fullmatch(r"\s*([^=\s]+)\s*=\s*([-a-z0-9_]+)\s*:\s*(member|co_pi|pi)\s*", item)
        if not found:
            raise ImproperlyConfigured(
                f"{name}: {item.strip()!r} is not group=project:role (role: member, co_pi "
                "or pi), e.g. vision-members=vision:member,vision-pis=vision:pi."
            )
        mapping.append((found[1], found[2], found[3]))
    return mapping


# Directory or provider groups that make their members part of a project, with a role.
GROUP_PROJECTS = _group_projects(
    "PORTAL_GROUP_PROJECTS",
    ""
    if IS_PRODUCTION
    else "vision-members=vision:member,vision-pis=vision:pi,genomics-pis=genomics:pi",
)
DIRECTORY_SYNC_INTERVAL_S = env_int("PORTAL_DIRECTORY_SYNC_INTERVAL_S", 300, minimum=10)

# REST API (/api/v1/). Scripts send a personal access token; the browser's
# session works too and keeps its CSRF check. The token scheme comes first so
# that a request without credentials is told 401 with `WWW-Authenticate: Bearer`.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_THROTTLE_CLASSES": ["accounts.authentication.TokenRateThrottle"],
    # The address limits count per client, not per X-Forwarded-For a client makes up.
    "NUM_PROXIES": PROXY_COUNT,
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "EXCEPTION_HANDLER": "portal.api_errors.api_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "portal.api_errors.ApiSchema",
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}


def _rate(name: str, default: str) -> str | None:
    """A DRF throttle rate such as ``120/min``; ``off`` turns the limit off."""
    value = env_str(name, default).strip()
    if value.lower() == "off":
        return None
    if not re.fullmatch(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)", value):
        raise ImproperlyConfigured(
            f"{name}={value!r} is not a rate; write requests per period, e.g. 120/min, "
            "1000/hour or 10/s, or off."
        )
    return value


# Requests per token (or per logged-in user), and per client address without credentials.
API_RATE = _rate("PORTAL_API_RATE", "120/min")
API_ANON_RATE = _rate("PORTAL_API_ANON_RATE", "30/min")
API_TOKEN_MAX_DAYS = env_int("PORTAL_API_TOKEN_MAX_DAYS", 365, minimum=1)
API_TOKEN_DEFAULT_DAYS = env_int("PORTAL_API_TOKEN_DEFAULT_DAYS", 30, minimum=1)
API_MAX_TOKENS_PER_USER = env_int("PORTAL_API_MAX_TOKENS_PER_USER", 20, minimum=1)
# Jobs never run as a system account: the worker refuses a login below this uid.
MIN_UID = env_int("PORTAL_MIN_UID", 1000, minimum=1)
if API_TOKEN_DEFAULT_DAYS > API_TOKEN_MAX_DAYS:
    raise ImproperlyConfigured(
        "PORTAL_API_TOKEN_DEFAULT_DAYS must not be larger than PORTAL_API_TOKEN_MAX_DAYS."
    )

SPECTACULAR_SETTINGS = {
    "TITLE": "Slurm GPU Portal API",
    "DESCRIPTION": (
        "Projects, GPU-hour balances, jobs and their output, templates, allocation "
        "requests and personal access tokens. Send `Authorization: Bearer <token>`; "
        'every error has the shape `{"error": {"code", "message", "fields"}}`.'
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "JobStateEnum": "jobs.states.JobState",
        "AllocationStateEnum": "accounts.models.Allocation.State",
        "AllocationRequestStateEnum": "accounts.models.AllocationRequest.State",
    },
    # Swagger UI and Redoc from drf-spectacular-sidecar's static files: no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
}

# Celery: JSON only, tasks acknowledged after they ran (every task is
# idempotent), bounded in time so a hung Slurm call cannot pin a worker.
BROKER_URL = env_url("PORTAL_BROKER_URL", "redis://127.0.0.1:6379/0", schemes=("redis", "rediss"))
CELERY_BROKER_URL = _with_password(BROKER_URL, REDIS_PASSWORD)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_int("PORTAL_BROKER_VISIBILITY_TIMEOUT_S", 3600, minimum=60),
    "socket_connect_timeout": 2,
}
CELERY_TASK_DEFAULT_QUEUE = env_str("PORTAL_TASK_QUEUE", "celery")
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
# No result backend: what the web tier waits on comes back through the cache
# (jobs/dispatch.py ask/reply).
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = env_int("PORTAL_TASK_TIME_LIMIT_S", 300, minimum=10)
CELERY_TASK_SOFT_TIME_LIMIT = env_int("PORTAL_TASK_SOFT_TIME_LIMIT_S", 240, minimum=5)
if CELERY_TASK_SOFT_TIME_LIMIT >= CELERY_TASK_TIME_LIMIT:
    raise ImproperlyConfigured(
        "PORTAL_TASK_SOFT_TIME_LIMIT_S must be smaller than PORTAL_TASK_TIME_LIMIT_S."
    )
CELERY_TIMEZONE = "UTC"
# Celery's Django fix-up closes the database connection around every task unless
# this is set, so each submission would open a new one; portal/celery.py still
# closes connections that are too old or broken.
CELERY_DB_REUSE_MAX = env_int("PORTAL_CELERY_DB_REUSE_MAX", 1000, minimum=0)
PORTAL_HEARTBEAT_INTERVAL_S = env_int("PORTAL_HEARTBEAT_INTERVAL_S", 30, minimum=1)
# Beat asks every cluster's controller whether it answers this often; /healthz and the
# pages read the stored answer (a probe older than three intervals is not believed).
CLUSTER_PROBE_INTERVAL_S = env_int("PORTAL_CLUSTER_PROBE_INTERVAL_S", 10, minimum=1)
# The queue sync reads each cluster's nodes too (for the status page) when its status
# is older than this; a stuck-GPU alert lists jobs pending longer than the bound.
CLUSTER_STATUS_INTERVAL_S = env_int("PORTAL_CLUSTER_STATUS_INTERVAL_S", 10, minimum=1)
STUCK_GPU_PENDING_MINUTES = env_int("PORTAL_STUCK_GPU_PENDING_MINUTES", 10, minimum=1)
# With this token (`Authorization: Bearer …`) a monitoring system gets /healthz's detail,
# as staff do; anyone else gets the verdict alone.
HEALTH_TOKEN = env_str("PORTAL_HEALTH_TOKEN", "")
CELERY_BEAT_SCHEDULE = {
    "clusters-probe": {
        "task": "clusters.tasks.clusters_probe_task",
        "schedule": CLUSTER_PROBE_INTERVAL_S,
        "options": {"expires": CLUSTER_PROBE_INTERVAL_S},
    },
    "heartbeat": {
        "task": "portal.tasks.heartbeat_task",
        "schedule": PORTAL_HEARTBEAT_INTERVAL_S,
    },
    "allocations-expire": {
        "task": "accounts.tasks.allocations_expire_task",
        "schedule": 3600,
    },
    "reconcile-slurm": {
        "task": "accounts.tasks.reconcile_task",
        "schedule": env_int("PORTAL_RECONCILE_INTERVAL_S", 300, minimum=10),
    },
    "partitions-sync": {
        "task": "clusters.tasks.partitions_sync_all_task",
        "schedule": env_int("PORTAL_PARTITIONS_SYNC_INTERVAL_S", 600, minimum=10),
    },
    "queue-sync": {
        "task": "jobs.tasks.queue_sync_all_task",
        "schedule": env_int("PORTAL_QUEUE_SYNC_INTERVAL_S", 5, minimum=1),
        "options": {"expires": 30},
    },
    "accounting-ingest": {
        "task": "jobs.tasks.accounting_ingest_all_task",
        "schedule": env_int("PORTAL_ACCOUNTING_INTERVAL_S", 30, minimum=5),
        "options": {"expires": 120},
    },
    "notifications-send": {
        "task": "accounts.tasks.notifications_send_task",
        "schedule": env_int("PORTAL_NOTIFICATIONS_INTERVAL_S", 900, minimum=60),
    },
    "job-mails-send": {
        "task": "jobs.tasks.job_mails_send_task",
        "schedule": env_int("PORTAL_JOB_MAIL_INTERVAL_S", 60, minimum=10),
    },
    "directory-sync": {
        "task": "accounts.tasks.directory_sync_task",
        "schedule": DIRECTORY_SYNC_INTERVAL_S,
    },
    "webhook-deliveries": {
        "task": "accounts.tasks.webhook_deliveries_sweep_task",
        "schedule": env_int("PORTAL_WEBHOOK_SWEEP_INTERVAL_S", 30, minimum=5),
        "options": {"expires": 60},
    },
    "submissions-sweep": {
        "task": "jobs.tasks.submissions_sweep_task",
        "schedule": env_int("PORTAL_SUBMIT_SWEEP_INTERVAL_S", 30, minimum=5),
    },
}

# Mail: PIs hear of 80 %/100 % usage and of allocations about to expire. In
# development mails are printed to the worker's log.
EMAIL_BACKEND = env_str(
    "PORTAL_EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend"
    if IS_PRODUCTION
    else "django.core.mail.backends.console.EmailBackend",
)
EMAIL_HOST = env_str("PORTAL_EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("PORTAL_EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("PORTAL_EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("PORTAL_EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("PORTAL_EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = env_int("PORTAL_EMAIL_TIMEOUT_S", 10, minimum=1)
PORTAL_EMAIL_FROM = env_str("PORTAL_EMAIL_FROM", "portal@localhost")
DEFAULT_FROM_EMAIL = PORTAL_EMAIL_FROM
# Where users reach the portal, for the links in mails (no slash at the end).
PORTAL_BASE_URL = env_str("PORTAL_BASE_URL", "http://localhost:8000").rstrip("/")
# A researcher is mailed of their jobs' ends (jobs.job_mail) once the first of them has
# waited this long: the jobs that end meanwhile go into the same mail.
JOB_MAIL_DIGEST_S = env_int("PORTAL_JOB_MAIL_DIGEST_S", 180, minimum=0)


def _networks(name: str, default: str = "") -> list[str]:
    """Comma-separated networks (CIDR); ``off``: none, whatever the default."""
    value = env_str(name, default).strip()
    if not value or value.lower() == "off":
        return []
    networks = [item.strip() for item in value.split(",")]
    for network in networks:
        try:
            ipaddress.ip_network(network)
        except ValueError as error:
            raise ImproperlyConfigured(
                f"{name}: {network!r} is not a network such as 10.1.0.0/16 ({error})."
            ) from None
    return networks


# Prometheus metrics at /metrics (portal/metrics.py, README "Metrics"). Off (404) unless
# a scrape token or an address allow-list is set; with both, a scrape needs both. The
# address is the client's as PORTAL_PROXY_COUNT says (behind a proxy: the one it saw).
METRICS_TOKEN = env_str("PORTAL_METRICS_TOKEN", "")
METRICS_ALLOWED_NETWORKS = _networks(
    "PORTAL_METRICS_ALLOWED_NETWORKS", "" if IS_PRODUCTION else "127.0.0.0/8,::1/128"
)
# The folder the portal's processes on this host keep their counts in (prometheus_client's
# multiprocess mode): each service writes into a folder of its own inside it, named by
# PROMETHEUS_MULTIPROC_DIR, and /metrics adds up all of them. Empty: the web process
# serves its own counts alone (one process, e.g. runserver).
METRICS_DIR = env_str("PORTAL_METRICS_DIR", "")

# Webhooks (accounts/webhooks.py). A delivery never goes to a loopback, link-local,
# private or otherwise non-public address unless one of these networks holds it.
WEBHOOK_ALLOWED_NETWORKS = _networks("PORTAL_WEBHOOK_ALLOWED_NETWORKS")
WEBHOOK_TIMEOUT_S = env_int("PORTAL_WEBHOOK_TIMEOUT_S", 10, minimum=1)
WEBHOOK_RETRY_BASE_S = env_int("PORTAL_WEBHOOK_RETRY_BASE_S", 30, minimum=1)
WEBHOOK_MAX_ATTEMPTS = env_int("PORTAL_WEBHOOK_MAX_ATTEMPTS", 8, minimum=1)
WEBHOOK_DISABLE_AFTER = env_int("PORTAL_WEBHOOK_DISABLE_AFTER", 15, minimum=1)

# Jobs. Working directories and output paths must lie inside one of these
# roots ({user}: the job owner's POSIX login, {home}: their home directory).
JOB_ROOTS = env_list("PORTAL_JOB_ROOTS", ["{home}", "/scratch/{user}"])
JOB_DEFAULT_PATH = env_str("PORTAL_JOB_DEFAULT_PATH", "/usr/local/bin:/usr/bin:/bin")
JOB_MAX_SCRIPT_BYTES = env_int("PORTAL_JOB_MAX_SCRIPT_BYTES", 256 * 1024, minimum=1024)
# The most of a job's output one page or API call returns (its end, when longer).
JOB_OUTPUT_MAX_BYTES = env_int("PORTAL_JOB_OUTPUT_MAX_BYTES", 1024 * 1024, minimum=1024)
# A job left in `new`/`submitting` this long (its worker died, Redis was down)
# is enqueued again by the sweeper; a claim lasts as long before another worker may take it.
JOB_SUBMIT_CLAIM_S = env_int("PORTAL_JOB_SUBMIT_CLAIM_S", 90, minimum=10)
# Accounting is read again from a little before the last read: records that
# Slurm writes late (a job's end) are not missed.
ACCOUNTING_OVERLAP_S = env_int("PORTAL_ACCOUNTING_OVERLAP_S", 300, minimum=0)
ESTIMATE_TIMEOUT_S = env_int("PORTAL_ESTIMATE_TIMEOUT_S", 3, minimum=1)
# The longest wait between two tries of a submission Slurm could not take (the waits
# double from 2 s, with jitter): how soon after Slurm returns the backlog goes in.
SUBMIT_RETRY_MAX_S = env_int("PORTAL_SUBMIT_RETRY_MAX_S", 30, minimum=2)
# How long a page or API call waits for a worker to read a job's output for it.
OUTPUT_TIMEOUT_S = env_int("PORTAL_OUTPUT_TIMEOUT_S", 5, minimum=1)

# Slurm. Clusters themselves are rows in the database (admin console or
# seed_demo); these settings say how the worker reaches them.
SLURM_RUN_AS_PREFIX = env_str("PORTAL_SLURM_RUN_AS_PREFIX", "runuser -u {user} --")
SLURM_COMMAND_TIMEOUT_S = env_int("PORTAL_SLURM_COMMAND_TIMEOUT_S", 20, minimum=1)
SLURM_HEALTH_TIMEOUT_S = env_int("PORTAL_SLURM_HEALTH_TIMEOUT_S", 5, minimum=1)
SLURM_BIN_DIR = env_str("PORTAL_SLURM_BIN_DIR", "")
# The reconciler sets each project account's MaxSubmitJobs to this (each member may have
# this many jobs pending or running, every array task counting) so nobody floods
# slurmctld from outside the portal; the portal refuses an array over it up front.
SLURM_MAX_SUBMIT_JOBS = env_int("PORTAL_SLURM_MAX_SUBMIT_JOBS", 1000, minimum=1)

LOG_FORMAT = env_str("PORTAL_LOG_FORMAT", "plain")
if LOG_FORMAT not in {"plain", "json"}:
    raise ImproperlyConfigured(f"PORTAL_LOG_FORMAT={LOG_FORMAT!r} must be 'plain' or 'json'.")
# Web, worker and beat alike (portal/logs.py): one record a line.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {
            "()": "portal.logs.PlainFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
        },
        "json": {"()": "portal.logs.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": env_str("PORTAL_LOG_LEVEL", "INFO")},
    "loggers": {
        # Without Django's own handlers (its console one prints bare messages in debug
        # mode): its records reach the root's handler once, in the portal's format.
        "django": {"handlers": [], "level": "NOTSET"},
        # One line per slurmrestd request is noise; errors surface as SlurmError.
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
    },
}
