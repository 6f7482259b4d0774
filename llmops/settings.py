"""Settings for the LLM job queue, every knob from the environment (llmops/env.py). What each
means: docs/operations.md#settings; values wrong for an app are its checks (llmops/checks.py).
"""

import os
from pathlib import Path

from agents.defaults import *  # noqa: F403 (each app's group of settings, read as here)
from alerts.defaults import *  # noqa: F403
from api.defaults import *  # noqa: F403
from deferred.defaults import *  # noqa: F403
from jobs.defaults import *  # noqa: F403
from jobs.defaults import LLM_MAX_REQUEST_BYTES
from keys.hashing import derived_hash_secret
from llmops.env import DEVELOPMENT_SECRET_KEY, env
from llmops.queues import AGENTS_QUEUE, ALERTS_QUEUE, DEFAULT_QUEUE, KEY_PREFIX, LLM_QUEUE
from mcp_tools.defaults import *  # noqa: F403
from ratelimits.defaults import *  # noqa: F403
from retention.defaults import *  # noqa: F403
from tracing.defaults import *  # noqa: F403
from webhooks.defaults import *  # noqa: F403

BASE_DIR = Path(__file__).resolve().parent.parent

# --- Security ---------------------------------------------------------------------------------
DEBUG = env.switch("DJANGO_DEBUG", False)  # off unless asked for: `make run` turns it on
# HTTPS only (production). Off by default: `make run` and the tests speak plain http.
SECURE = env.switch("DJANGO_SECURE", False)
SECRET_KEY = env.secret_key("DJANGO_SECRET_KEY", debug=DEBUG, secure=SECURE)
ALLOWED_HOSTS = env.allowed_hosts("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]", SECURE)
SECURE_PROXY_SSL_HEADER = env.proxy_ssl_header("DJANGO_SECURE_PROXY_SSL_HEADER")
SECURE_SSL_REDIRECT = env.switch("DJANGO_SECURE_SSL_REDIRECT", SECURE)
# Probes speak plain http inside the network: a redirect would pass for "healthy".
SECURE_REDIRECT_EXEMPT = [r"^(healthz|readyz)$"]
SESSION_COOKIE_SECURE = env.switch("DJANGO_SESSION_COOKIE_SECURE", SECURE)
CSRF_COOKIE_SECURE = env.switch("DJANGO_CSRF_COOKIE_SECURE", SECURE)
SECURE_HSTS_SECONDS = env.integer(
    "DJANGO_SECURE_HSTS_SECONDS", 31_536_000 if SECURE else 0, minimum=0
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.switch("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", SECURE)
SECURE_HSTS_PRELOAD = env.switch("DJANGO_SECURE_HSTS_PRELOAD", SECURE)
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
# Django's defaults, held by tests/test_security_headers.py; the live page reads the CSRF cookie.
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_HTTPONLY = False
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
CSRF_TRUSTED_ORIGINS = list(filter(None, env.list("DJANGO_CSRF_TRUSTED_ORIGINS", [], str)))

INSTALLED_APPS = [
    "llmops.apps.LlmopsAdminConfig",  # django.contrib.admin, the DLQ and budgets first
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "rest_framework",
    # The OpenAPI schema and Swagger UI, served from our own static files (no CDN).
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "ops.apps.RqConfig",  # django-rq, as "Queues (RQ)" on the admin index
    "django_prometheus",
    "providers",
    "jobs",
    "ledger",
    "metrics",  # the first transition subscriber: counter rows are locked first
    "alerts",
    "dlq",
    "fake_provider",
    "ops",
    "ratelimits",
    "batches",
    "pipelines",
    "agents",
    "loops",
    "keys",
    "embeddings",
    "features",
    "deferred",
    "audit",  # who changed providers, prices, budgets, feature policies and keys
    "webhooks",  # signed POSTs of final states to callback URLs: jobs, agent runs, batches
    "gateway",  # the front doors: the Anthropic and OpenAI APIs at /anthropic and /openai/v1
    "tracing",  # OpenTelemetry spans of jobs, attempts, runs and tools; the admin timelines
    "retention",  # llm_prune: old jobs' and runs' content emptied, rows and money kept
    "mcp_tools",  # MCP servers whose tools agent runs call as <server>__<tool>
]

MIDDLEWARE = [
    # First and last: django-prometheus times every request (HTTP metrics on /metrics).
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    # Early: a request id for every line the request logs, and one access-log line for it.
    "llmops.middleware.RequestLogMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # Before CommonMiddleware: /api/... without its trailing slash is served, not redirected.
    "api.trailing_slash.ApiTrailingSlashMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "llmops.urls"
CSRF_FAILURE_VIEW = "api.errors.csrf_failure"  # JSON under /api/, Django's page elsewhere
LOGIN_URL = "login"  # the live page's sign-in (any active user; the admin's is for staff)
LOGIN_REDIRECT_URL = "live"

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

WSGI_APPLICATION = "llmops.wsgi.application"
ASGI_APPLICATION = "llmops.asgi.application"

DATABASES = {"default": env.database("DATABASE_URL", "sqlite:///", base_dir=BASE_DIR)}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
SERVE_STATIC = env.switch("DJANGO_SERVE_STATIC", True)  # unless a front proxy serves them
# One process per core: a process serves many requests at once but runs Python on one core.
WEB_CONCURRENCY = env.integer("WEB_CONCURRENCY", len(os.sched_getaffinity(0)), minimum=1)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # API keys first so that an unauthenticated request answers 401 with WWW-Authenticate;
        # "Bearer <key>" or "Token <key>" (api/authentication.py).
        "api.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # A key's scopes (keys/permissions.py); a view with permission_classes of its own lists both.
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "keys.permissions.HasScope",
    ],
    "DEFAULT_PARSER_CLASSES": ["api.parsers.LimitedJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "EXCEPTION_HANDLER": "api.errors.exception_handler",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": env.integer("API_PAGE_SIZE", 50, minimum=1),
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_SCHEMA_CLASS": "api.schema.ScopedAutoSchema",  # with each operation's key scope
}
# Ten a second per user, sustained: above any person or integration, below a runaway loop.
LLM_SUBMIT_THROTTLE_RATE = env.str("LLM_SUBMIT_THROTTLE_RATE", "") or "600/min"

# The OpenAPI schema: api/defaults.py (SPECTACULAR_SETTINGS).

# --- API keys (keys/, docs/operations.md#api-keys) -------------------------------------------
# Keys are stored as HMAC-SHA256 under this secret, never in the database. Empty: derived from
# DJANGO_SECRET_KEY when that is set (changing it then invalidates every key), else from the
# development key, which check --deploy refuses (keys.E001). Old values in
# API_KEY_HASH_SECRET_FALLBACKS keep keys working.
API_KEY_HASH_SECRET = env.str("API_KEY_HASH_SECRET", "") or derived_hash_secret(
    env.str("DJANGO_SECRET_KEY", "") or DEVELOPMENT_SECRET_KEY
)
API_KEY_HASH_SECRET_FALLBACKS = env.names("API_KEY_HASH_SECRET_FALLBACKS")
# A rotated key's old secret works this long unless the rotation says otherwise (a day).
API_KEY_ROTATION_GRACE_SECONDS = env.integer("API_KEY_ROTATION_GRACE_SECONDS", 86400, minimum=0)
# last_used_at is written at most this often per key: one UPDATE a minute, not one a request.
API_KEY_LAST_USED_INTERVAL_SECONDS = env.number(
    "API_KEY_LAST_USED_INTERVAL_SECONDS", 60.0, minimum=0.0
)

# --- Redis, queues, workers -------------------------------------------------------------------
REDIS_URL = env.str("REDIS_URL", "redis://127.0.0.1:6379/0")
# Or the primary Redis Sentinel names (docs/deploy.md#redis-sentinel): REDIS_SENTINELS with
# REDIS_SENTINEL_MASTER, or a redis+sentinel:// REDIS_URL. Every client below is built from it.
REDIS = env.redis("REDIS_URL", "redis://127.0.0.1:6379/0")
LLM_JOB_TIMEOUT = env.integer("LLM_JOB_TIMEOUT", 240, minimum=10)
LLM_JOB_TIMEOUT_MARGIN = env.number("LLM_JOB_TIMEOUT_MARGIN", 30.0, minimum=1.0)

# Above channels-redis's 5 s blocking receive, which a shorter read timeout cuts off.
CHANNEL_LAYER_SOCKET_TIMEOUT = env.number("CHANNEL_LAYER_SOCKET_TIMEOUT", 15.0, minimum=7.0)
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "jobs.channel_layer.RedisChannelLayer",  # channels-redis, cancellable receive
        "CONFIG": {
            "hosts": [REDIS.channel_layer_host(CHANNEL_LAYER_SOCKET_TIMEOUT, connect_timeout=5)],
            "prefix": KEY_PREFIX + "channels:",
            # Dropped silently past it; a slow socket's backlog is bounded by WS_MAX_QUEUED_BYTES.
            "capacity": env.integer("CHANNEL_LAYER_CAPACITY", 1000, minimum=100),
            "expiry": env.integer("CHANNEL_LAYER_EXPIRY", 60, minimum=5),  # then a client polls
            "group_expiry": 86400,  # consumers re-join on reconnect
        },
    }
}
JOB_EVENTS_PUBLISH_TIMEOUT = env.number("JOB_EVENTS_PUBLISH_TIMEOUT", 1.0, minimum=0.05)
# A streaming job's text: job.delta events at most this often per job, and the text a client
# may resume from (kept in Redis while the job runs) at most this many characters.
LLM_DELTA_INTERVAL_SECONDS = env.number("LLM_DELTA_INTERVAL_SECONDS", 0.2, minimum=0.01)
LLM_PARTIAL_TEXT_MAX_CHARS = env.integer("LLM_PARTIAL_TEXT_MAX_CHARS", 1_000_000, minimum=1000)
# Cancel of a running job: the worker looks this often; the API waits this long for its end.
LLM_CANCEL_POLL_SECONDS = env.number("LLM_CANCEL_POLL_SECONDS", 0.5, minimum=0.05)
LLM_CANCEL_WAIT_SECONDS = env.number("LLM_CANCEL_WAIT_SECONDS", 3.0, minimum=0.0)

RQ = {"WORKER_CLASS": "runtime.workers.LlmWorker"}
LLM_WORKER_CONCURRENCY = env.integer("LLM_WORKER_CONCURRENCY", 32, minimum=1)
LLM_WORKER_DB_CONNECTIONS = env.integer("LLM_WORKER_DB_CONNECTIONS", 8, minimum=1)
# A closed connection of a threaded worker waits this long for its next thread, then closes
# (runtime/db_connections.py); 0: every job thread opens its own.
LLM_WORKER_DB_IDLE_SECONDS = env.number("LLM_WORKER_DB_IDLE_SECONDS", 10.0, minimum=0.0)
WORKER_NICE = env.integer("WORKER_NICE", 10, minimum=0)  # the API keeps the CPU (bench/submit.py)
LLM_WORKER_DB_SLOT_WAIT_SECONDS = env.number("LLM_WORKER_DB_SLOT_WAIT_SECONDS", 60.0, minimum=0.1)
# Above the threaded worker's one-second blocking dequeue; rq's forking worker raises its own.
LLM_REDIS_SOCKET_TIMEOUT = env.number("LLM_REDIS_SOCKET_TIMEOUT", 10.0, minimum=3.0)
LLM_REDIS_CONNECT_TIMEOUT = env.number("LLM_REDIS_CONNECT_TIMEOUT", 5.0, minimum=0.1)
# Not for CHANNEL_LAYERS: a socket's channel-layer receive blocks as long as the socket is quiet.
RQ_REDIS = REDIS.rq_connection(LLM_REDIS_SOCKET_TIMEOUT, LLM_REDIS_CONNECT_TIMEOUT)
RQ_QUEUES = {
    LLM_QUEUE: {**RQ_REDIS, "DEFAULT_TIMEOUT": LLM_JOB_TIMEOUT},
    DEFAULT_QUEUE: {**RQ_REDIS, "DEFAULT_TIMEOUT": 300},
    ALERTS_QUEUE: {**RQ_REDIS, "DEFAULT_TIMEOUT": 60},
    # Each tool task sets its own timeout (its calls' timeouts: agents/runner.py).
    AGENTS_QUEUE: {**RQ_REDIS, "DEFAULT_TIMEOUT": 600},
}

# --- Provider ---------------------------------------------------------------------------------
ANTHROPIC_API_KEY = env.str("ANTHROPIC_API_KEY", "")
# Variables a provider row may name for its key besides *_API_KEY (comma-separated); never one
# of these settings' own (providers/key_envs.py).
LLM_PROVIDER_KEY_ENVS = env.names("LLM_PROVIDER_KEY_ENVS")
FAKE_PROVIDER_URL = env.str("FAKE_PROVIDER_URL", "http://127.0.0.1:8787")
# An explicit base URL always wins; with no key the local fake provider stands in.
ANTHROPIC_BASE_URL = env.str("ANTHROPIC_BASE_URL", "") or (
    "https://api.anthropic.com" if ANTHROPIC_API_KEY else FAKE_PROVIDER_URL
)
# A stream silent this long (no event, not even a ping) has stalled: an unknown outcome, retried
# once. LLM_PROVIDER_READ_TIMEOUT, its name before calls streamed, is still read.
LLM_STREAM_IDLE_SECONDS = env.number(
    "LLM_STREAM_IDLE_SECONDS", env.number("LLM_PROVIDER_READ_TIMEOUT", 60.0), minimum=0.1
)
# The call's deadline allows this many times the SDK's expected generation time for max_tokens.
LLM_CALL_DEADLINE_SCALE = env.number(
    "LLM_CALL_DEADLINE_SCALE", env.number("LLM_READ_TIMEOUT_SCALE", 2.0), minimum=0.0
)
LLM_PROVIDER_CONNECT_TIMEOUT = env.number("LLM_PROVIDER_CONNECT_TIMEOUT", 10.0, minimum=0.1)

# --- Jobs and retries: jobs/defaults.py, agents/defaults.py, deferred/defaults.py ------------
DATA_UPLOAD_MAX_MEMORY_SIZE = max(LLM_MAX_REQUEST_BYTES + 1, 2_621_440)
# --- Rate limits: ratelimits/defaults.py (checked in ratelimits/checks.py) ---------------
# --- Webhooks: webhooks/defaults.py (checked in webhooks/checks.py) ---------------------------

# --- Budgets, observability -------------------------------------------------------------------
LEDGER_FORECAST_WINDOW_HOURS = env.number("LEDGER_FORECAST_WINDOW_HOURS", 24.0, minimum=0.1)
METRICS_TOKEN = env.str("METRICS_TOKEN", "")  # empty: no token is accepted
METRICS_ALLOWED_NETWORKS = env.names("METRICS_ALLOWED_NETWORKS")
DEMO_USERNAME = env.str("DEMO_USERNAME", "demo")
DEMO_PASSWORD = env.str("DEMO_PASSWORD", "llmops-demo")
LOG_FORMAT = env.choice("LOG_FORMAT", "json", ("json", "plain"))  # not a check: read by LOGGING
LOG_LEVEL = env.str("LOG_LEVEL", "INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {"()": "llmops.logs.JsonFormatter"},
        "plain": {"()": "llmops.logs.PlainFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    # One handler for everything: rq's loggers find it and add none; the others propagate to it.
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
        # The SDK's DEBUG lines hold whole request bodies (prompts) even when LOG_LEVEL=DEBUG.
        "anthropic": {"level": "WARNING"},
        # Django's and uvicorn's own console handlers off: theirs propagate to ours.
        "django": {"handlers": [], "propagate": True},
        "django.server": {"handlers": [], "propagate": True},
        "uvicorn": {"handlers": [], "propagate": True},
        # Off: llmops.access (llmops/middleware.py) logs each request once, with its request id.
        "uvicorn.access": {"handlers": [], "propagate": False},
    },
}

# --- Alerts: alerts/defaults.py (checked in alerts/checks.py) -----------------------------------
# Off in production: workers would post wherever a caller points them inside our network.
CALLBACK_ALLOW_PRIVATE_HOSTS = env.switch("CALLBACK_ALLOW_PRIVATE_HOSTS", DEBUG)
EMAIL_BACKEND = env.str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", "llmops-alerts@localhost")
EMAIL_HOST = env.str("EMAIL_HOST", "localhost")
EMAIL_PORT = env.integer("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env.str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env.str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env.switch("EMAIL_USE_TLS", False)
