"""Settings for the demo site: SQLite (WAL) and an embedded broker unless told otherwise.

DATABASE_URL (dj-database-url) switches to PostgreSQL; CELERY_BROKER_URL to a real broker.
"""

from __future__ import annotations

import os
from importlib.util import find_spec
from pathlib import Path

import dj_database_url

import guarded_tools

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("GT_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "demo-only-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver", "[::1]"]

INSTALLED_APPS = [
    # Before the admin so that its admin/index.html adds the guarded_tools panel.
    "guarded_tools",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    # Swagger UI's files for agent/docs/, served from here rather than a CDN (requirements
    # install it; an environment built before it still starts, and docs/ says what is missing).
    *(["drf_spectacular_sidecar"] if find_spec("drf_spectacular_sidecar") else []),
    "project.demo",
]
# The OAuth authorization server (guarded-tools[oauth]): an app whenever it is installed,
# so that its tables exist; the agent endpoints accept its tokens when GT_OAUTH=1 (the demo).
OAUTH_INSTALLED = find_spec("oauth2_provider") is not None
if OAUTH_INSTALLED:
    INSTALLED_APPS.append("oauth2_provider")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "project.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "project.wsgi.application"
ASGI_APPLICATION = "project.asgi.application"

SQLITE_PATH = Path(os.environ.get("GT_SQLITE_PATH", VAR_DIR / "demo.sqlite3"))
DATABASES = {
    "default": dj_database_url.config(
        default=f"sqlite:///{SQLITE_PATH}", conn_max_age=int(os.environ.get("CONN_MAX_AGE", 0))
    )
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # WAL lets readers run beside the writer; IMMEDIATE makes a writer wait for the
    # lock at BEGIN instead of failing half-way ("database is locked").
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # A file (not :memory:) so that threads and subprocesses in tests share it; one per
    # process so that concurrent test runs never share one.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-{os.getpid()}.sqlite3")}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_PASSWORD_VALIDATORS: list[dict[str, str]] = []
# Django's ModelBackend, each user's permissions loaded in one query (docs: crash-safe handlers).
AUTHENTICATION_BACKENDS = ["guarded_tools.auth_backends.OneQueryModelBackend"]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # DRF's TokenAuthentication with its one query written once (same answers)
        "guarded_tools.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "guarded_tools demo",
    "DESCRIPTION": "Agent-callable tools, every call guarded.",
    "VERSION": guarded_tools.__version__,  # the package's one version
    "OAS_VERSION": "3.1.0",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}


def _installed(*modules: str) -> bool:
    try:
        return all(find_spec(m) is not None for m in modules)
    except ModuleNotFoundError:  # a parent package is missing
        return False


#: OpenTelemetry with the Prometheus exporter (``guarded-tools[otel]``): ``/metrics`` exists.
TELEMETRY_INSTALLED = _installed("opentelemetry.sdk", "opentelemetry.exporter.prometheus")
#: GT_TELEMETRY=1 (``make demo`` sets it) sends every call to OpenTelemetry.
TELEMETRY = TELEMETRY_INSTALLED and os.environ.get("GT_TELEMETRY", "0") == "1"
#: What a Prometheus scraper sends as ``Authorization: Bearer ...`` (staff need none).
METRICS_TOKEN = os.environ.get("GT_METRICS_TOKEN", "demo-metrics-token-0000000000000000000")

GUARDED_TOOLS = {
    "LEASE_SECONDS": int(os.environ.get("GT_LEASE_SECONDS", 60)),
    "EXECUTE_ON_APPROVAL": os.environ.get("GT_EXECUTE_ON_APPROVAL", "0") == "1",
    # MCP and the REST tool routes take the authorization server's bearer tokens too;
    # a tool needs demo:read (reads) or demo:write (changes) besides its permissions.
    "OAUTH_PROTECTS": ["mcp", "rest"]
    if OAUTH_INSTALLED and os.environ.get("GT_OAUTH", "0") == "1" else [],
    "OAUTH_DEFAULT_SCOPES": "guarded_tools.oauth.scope_per_app",
    "OBSERVERS": ["guarded_tools.otel.observe"] if TELEMETRY else [],
    # Where approvers' emails link to (the address the demo is opened at).
    "CONSOLE_BASE_URL": os.environ.get("GT_CONSOLE_BASE_URL", "http://127.0.0.1:8000"),
}

# django-oauth-toolkit as the authorization server for MCP hosts: authorization code
# with S256 PKCE only, loopback redirect URIs on any port (RFC 8252), clients registered
# by Client ID Metadata Document or Dynamic Client Registration, RFC 8707 audiences.
OAUTH2_PROVIDER = {
    "SCOPES": {
        "demo:read": "See your orders, slots and payment accounts",
        "demo:write": "Change your orders, book slots and send payments",
    },
    "DEFAULT_SCOPES": ["demo:read"],
    "PKCE_REQUIRED": True,
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,
    # OAuth 2.1: no implicit or password grant, neither accepted nor advertised.
    "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
    # RFC 9207: the authorization response names its issuer (MCP clients check it).
    "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": True,
    # Hosts are public clients (no secret): say so in the metadata.
    "OAUTH2_TOKEN_ENDPOINT_AUTH_METHODS_SUPPORTED": ["none", "client_secret_basic",
                                                     "client_secret_post"],
    "ALLOW_LOCALHOST_LOOPBACK": True,
    "ALLOWED_REDIRECT_URI_SCHEMES": ["http", "https"],
    "DCR_ENABLED": True,
    "DCR_REGISTRATION_PERMISSION_CLASSES": ("oauth2_provider.dcr.AllowAllDCRPermission",),
    "CIMD_ENABLED": True,
    "RESOURCE_SERVER_TOKEN_RESOURCE_VALIDATOR": "guarded_tools.oauth.validate_resource",
    "ACCESS_TOKEN_EXPIRE_SECONDS": 3600,
}

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem:"):
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {
        "data_folder_in": str(VAR_DIR / "broker"),
        "data_folder_out": str(VAR_DIR / "broker"),
        "processed_folder": str(VAR_DIR / "broker-processed"),
        # kombu writes its exchange tables to ./control unless told otherwise.
        "control_folder": str(VAR_DIR / "broker-control"),
        "store_processed": False,
    }
    for folder in ("broker", "broker-processed", "broker-control"):
        (VAR_DIR / folder).mkdir(parents=True, exist_ok=True)
else:
    # Redis (or SQS) hands an unacknowledged message to another worker after this many
    # seconds: keep it above the longest lease (check guarded_tools.W010).
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
# A worker busy with a long recover holds no sweeps another worker could run.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ALWAYS_EAGER = os.environ.get("CELERY_TASK_ALWAYS_EAGER", "0") == "1"
CELERY_BEAT_SCHEDULE = {
    "guarded-tools-sweep": {
        "task": "guarded_tools.tasks.sweep",
        "schedule": float(os.environ.get("GT_SWEEP_EVERY", 30)),
    },
    # Approvers are reminded once of a request that expires within the hour.
    "guarded-tools-remind": {
        "task": "guarded_tools.tasks.remind_approvers",
        "schedule": 300.0,
    },
}
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# Approvers' emails (sent by the Celery worker) print to its log unless told otherwise.
EMAIL_BACKEND = os.environ.get("DJANGO_EMAIL_BACKEND",
                               "django.core.mail.backends.console.EmailBackend")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"guarded_tools": {"handlers": ["console"], "level": "WARNING"}},
}
