"""Settings for the LLM job queue, every knob from the environment (llmops/env.py). What each
means: docs/operations.md#settings; values wrong for an app are its checks (llmops/checks.py).
"""

import os
from pathlib import Path

from redis.exceptions import ConnectionError as RedisConnectionError

from alerts import targets as alert_targets
from llmops.env import DEVELOPMENT_SECRET_KEY, env, with_socket_timeouts  # noqa: F401
from llmops.queues import AGENTS_QUEUE, ALERTS_QUEUE, DEFAULT_QUEUE, KEY_PREFIX, LLM_QUEUE

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
    "django.contrib.admin",
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

# Public: the schema describes the API and holds no data; every endpoint still asks for a token.
SPECTACULAR_SETTINGS = {
    "TITLE": "llmops API",
    "DESCRIPTION": (
        "LLM calls as background jobs: submit and poll jobs, batches and pipelines; costs, "
        "budgets and the dead-letter queue. Every error body is {code, message, detail} with a "
        "stable code.\n\nFull reference: `docs/api.md` in the repository (every field, the "
        "Idempotency-Key header, each error code, live events over the WebSocket)."
    ),
    # Sections by importance, not alphabetically (Swagger UI follows this list): jobs first.
    "TAGS": [
        {"name": "jobs", "description": "Submit a model call (202 at once), poll, list, cancel."},
        {"name": "batches", "description": "Up to 10,000 jobs in one request, followed as one."},
        {"name": "pipelines", "description": "Jobs run in turn, each fed the previous output."},
        {"name": "costs", "description": "What the calls cost, from the ledger, grouped one way."},
        {"name": "budgets", "description": "Spending limits per feature or user (staff)."},
        {"name": "failures", "description": "The dead-letter queue: requeue or resolve (staff)."},
        {"name": "me", "description": "Whom the token or session belongs to."},
    ],
    "VERSION": "1",
    "SCHEMA_PATH_PREFIX": r"/api/v1/",  # operations tagged by the segment after it
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],  # a stale token in the browser must not hide the schema
    "COMPONENT_SPLIT_REQUEST": True,  # read-only fields are not inputs
    # Two "status" choice sets: a job's, and a batch's (a pipeline's has the same values).
    "ENUM_NAME_OVERRIDES": {
        "JobStatusEnum": "jobs.models.LlmJob.Status",
        "JobKindEnum": "jobs.models.LlmJob.Kind",
        "JobModeEnum": "jobs.models.LlmJob.Mode",
        "BatchStatusEnum": "batches.models.Batch.Status",
        "AgentRunStatusEnum": "agents.models.AgentRun.Status",
        "AgentStepStatusEnum": "agents.models.AgentStep.Status",
    },
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- API keys (keys/, docs/operations.md#api-keys) -------------------------------------------
# Keys are stored as HMAC-SHA256 under this secret, never in the database. Empty: derived from
# DJANGO_SECRET_KEY under DJANGO_SECURE (rotating that one then invalidates every key), else a
# fixed development value. Old values in API_KEY_HASH_SECRET_FALLBACKS keep keys working.
API_KEY_HASH_SECRET = env.str("API_KEY_HASH_SECRET", "") or (
    "derived:" + (SECRET_KEY if SECURE else DEVELOPMENT_SECRET_KEY)
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
LLM_JOB_TIMEOUT = env.integer("LLM_JOB_TIMEOUT", 240, minimum=10)
LLM_JOB_TIMEOUT_MARGIN = env.number("LLM_JOB_TIMEOUT_MARGIN", 30.0, minimum=1.0)

# Above channels-redis's 5 s blocking receive, which a shorter read timeout cuts off.
CHANNEL_LAYER_SOCKET_TIMEOUT = env.number("CHANNEL_LAYER_SOCKET_TIMEOUT", 15.0, minimum=7.0)
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "jobs.channel_layer.RedisChannelLayer",  # channels-redis, cancellable receive
        "CONFIG": {
            "hosts": [
                {
                    "address": REDIS_URL,
                    "socket_timeout": CHANNEL_LAYER_SOCKET_TIMEOUT,
                    "socket_connect_timeout": 5,
                    "socket_keepalive": True,
                    # Once more on a new connection: after a Redis restart each pooled one is dead.
                    "retry_on_error": [RedisConnectionError],
                }
            ],
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
WORKER_NICE = env.integer("WORKER_NICE", 10, minimum=0)  # the API keeps the CPU (bench/submit.py)
LLM_WORKER_DB_SLOT_WAIT_SECONDS = env.number("LLM_WORKER_DB_SLOT_WAIT_SECONDS", 60.0, minimum=0.1)
# Above the threaded worker's one-second blocking dequeue; rq's forking worker raises its own.
LLM_REDIS_SOCKET_TIMEOUT = env.number("LLM_REDIS_SOCKET_TIMEOUT", 10.0, minimum=3.0)
LLM_REDIS_CONNECT_TIMEOUT = env.number("LLM_REDIS_CONNECT_TIMEOUT", 5.0, minimum=0.1)
# Not for CHANNEL_LAYERS: a socket's channel-layer receive blocks as long as the socket is quiet.
RQ_REDIS_URL = with_socket_timeouts(REDIS_URL, LLM_REDIS_SOCKET_TIMEOUT, LLM_REDIS_CONNECT_TIMEOUT)
RQ_QUEUES = {
    LLM_QUEUE: {"URL": RQ_REDIS_URL, "DEFAULT_TIMEOUT": LLM_JOB_TIMEOUT},
    DEFAULT_QUEUE: {"URL": RQ_REDIS_URL, "DEFAULT_TIMEOUT": 300},
    ALERTS_QUEUE: {"URL": RQ_REDIS_URL, "DEFAULT_TIMEOUT": 60},
    # Each tool task sets its own timeout (its calls' timeouts: agents/runner.py).
    AGENTS_QUEUE: {"URL": RQ_REDIS_URL, "DEFAULT_TIMEOUT": 600},
}

# --- Provider ---------------------------------------------------------------------------------
ANTHROPIC_API_KEY = env.str("ANTHROPIC_API_KEY", "")
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

# --- Jobs and retries -------------------------------------------------------------------------
LLM_MAX_REQUEST_BYTES = env.integer("LLM_MAX_REQUEST_BYTES", 1024 * 1024, minimum=1024)
WS_MAX_MESSAGE_BYTES = env.integer("WS_MAX_MESSAGE_BYTES", 16 * 1024, minimum=1024)
WS_REAUTH_SECONDS = env.number("WS_REAUTH_SECONDS", 5.0, minimum=0.1)
WS_MAX_QUEUED_BYTES = env.integer("WS_MAX_QUEUED_BYTES", 1024 * 1024, minimum=128 * 1024)
WS_MAX_CONNECTIONS_PER_USER = env.integer("WS_MAX_CONNECTIONS_PER_USER", 20, minimum=1)
LLM_BATCH_MAX_ITEMS = env.integer("LLM_BATCH_MAX_ITEMS", 10_000, minimum=1)
LLM_EMBEDDING_GROUP_SIZE = env.integer("LLM_EMBEDDING_GROUP_SIZE", 128, minimum=1)  # <= 2048 used
# 10,000 items of about 1.6 KB; the web process holds the parsed body (several times its size).
LLM_BATCH_MAX_REQUEST_BYTES = env.integer(
    "LLM_BATCH_MAX_REQUEST_BYTES", 16 * 1024 * 1024, minimum=1024
)
LLM_BATCH_PROGRESS_INTERVAL = env.number("LLM_BATCH_PROGRESS_INTERVAL", 1.0, minimum=0.0)
DATA_UPLOAD_MAX_MEMORY_SIZE = max(LLM_MAX_REQUEST_BYTES + 1, 2_621_440)
LLM_MAX_ATTEMPTS = env.integer("LLM_MAX_ATTEMPTS", 10, minimum=1)
# Each step a provider call of seconds to minutes: 20 in a row is already a long chain.
PIPELINE_MAX_STEPS = env.integer("PIPELINE_MAX_STEPS", 20, minimum=1)
# Agent tools: dotted modules imported at start beside every installed app's agent_tools.py.
LLM_AGENT_TOOL_MODULES = env.names("LLM_AGENT_TOOL_MODULES", "agents.demo_tools")
# A run waiting for a human longer than this (a day) fails with approval_timeout.
LLM_AGENT_APPROVAL_TIMEOUT_SECONDS = env.number(
    "LLM_AGENT_APPROVAL_TIMEOUT_SECONDS", 86400.0, minimum=1.0
)
# Tool calls of one turn run at once, up to this many (threads of the default worker).
LLM_AGENT_TOOL_CONCURRENCY = env.integer("LLM_AGENT_TOOL_CONCURRENCY", 4, minimum=1)
# Tool tasks (one per turn) one `rqworker agents` process runs at once, each on a thread.
LLM_AGENT_WORKER_CONCURRENCY = env.integer("LLM_AGENT_WORKER_CONCURRENCY", 16, minimum=1)
LLM_RETRY_SCHEDULES: dict[str, list[float]] = env.json_value("LLM_RETRY_SCHEDULES", {})
LLM_RETRY_JITTER = env.number("LLM_RETRY_JITTER", 0.30, minimum=0.0)
LLM_CONCURRENCY_PER_KEY = env.integer("LLM_CONCURRENCY_PER_KEY", 1, minimum=1)
LLM_CONCURRENCY_KEY_WAIT_SECONDS = env.number("LLM_CONCURRENCY_KEY_WAIT_SECONDS", 2.0, minimum=0.1)
LLM_RETRY_DELAY_SCALE = env.number("LLM_RETRY_DELAY_SCALE", 1.0, minimum=0.0)
LLM_HEARTBEAT_SECONDS = env.number("LLM_HEARTBEAT_SECONDS", 10.0, minimum=0.1)
LLM_STALE_AFTER_SECONDS = env.number("LLM_STALE_AFTER_SECONDS", 45.0, minimum=1.0)
LLM_LOST_QUEUE_GRACE_SECONDS = env.number("LLM_LOST_QUEUE_GRACE_SECONDS", 30.0, minimum=0.0)
LLM_RECONCILE_INTERVAL = env.number("LLM_RECONCILE_INTERVAL", 15.0, minimum=0.1)
# rq's scheduler polls every second: 15 s is many of its passes, not one late poll.
LLM_OVERDUE_RETRY_SECONDS = env.number("LLM_OVERDUE_RETRY_SECONDS", 15.0, minimum=0.0)
LLM_RECORD_RETRY_SECONDS = env.number("LLM_RECORD_RETRY_SECONDS", 60.0, minimum=0.0)
LLM_BREAKER_ENABLED = env.switch("LLM_BREAKER_ENABLED", True)
# One call every 30 s is no load, and dispatch resumes within about a minute of a fix.
LLM_BREAKER_PROBE_SECONDS = env.number("LLM_BREAKER_PROBE_SECONDS", 30.0, minimum=1.0)
LLM_OVERDUE_RETRY_ALERT_SECONDS = env.number("LLM_OVERDUE_RETRY_ALERT_SECONDS", 120.0, minimum=0.0)
# Fallbacks (features/, jobs/fallbacks.py): two transient failures in a row on one model say it
# is in trouble (a 529 storm lasts minutes), not a blip its own retry schedule rides out.
LLM_FALLBACK_AFTER_ATTEMPTS = env.integer("LLM_FALLBACK_AFTER_ATTEMPTS", 2, minimum=1)
# A limiter wait this long (a full minute's window is 60 s) is better spent on the next model.
LLM_FALLBACK_AFTER_WAIT_SECONDS = env.number("LLM_FALLBACK_AFTER_WAIT_SECONDS", 30.0, minimum=0.0)
# Deferred jobs (deferred/): gathered per model into provider message batches at the batch price.
LLM_DEFERRED_FLUSH_SECONDS = env.number("LLM_DEFERRED_FLUSH_SECONDS", 60.0, minimum=0.0)
LLM_DEFERRED_MAX_BATCH = env.integer("LLM_DEFERRED_MAX_BATCH", 10_000, minimum=1)
# A batch is read this often: results are there only once it ends (minutes to hours).
LLM_DEFERRED_POLL_SECONDS = env.number("LLM_DEFERRED_POLL_SECONDS", 10.0, minimum=0.1)
# Beyond a real-time run's own bound (its RQ timeout): 10 minutes of slack before a deadline.
LLM_DEFERRED_FALLBACK_MARGIN_SECONDS = env.number(
    "LLM_DEFERRED_FALLBACK_MARGIN_SECONDS", 600.0, minimum=0.0
)
# Deadlines (jobs/deadlines.py): a WARNING when a feature meets fewer than 95 % in an hour; a
# job whose deadline is within 60 s of its enqueue goes to the front of the llm queue.
LLM_DEADLINE_ALERT_RATIO = env.number("LLM_DEADLINE_ALERT_RATIO", 0.95, minimum=0.0)
LLM_DEADLINE_FRONT_SECONDS = env.number("LLM_DEADLINE_FRONT_SECONDS", 60.0, minimum=0.0)

# --- Rate limits (ratelimits/, checked in ratelimits/checks.py) ------------------------------
LLM_RATE_LIMIT_ENABLED = env.switch("LLM_RATE_LIMIT_ENABLED", True)
LLM_RATE_LIMITS = env.json_value("LLM_RATE_LIMITS", {})
# Just under a second: a `retry-after: 1` pause has begun by then, so it is waited out here.
LLM_RATE_LIMIT_MAX_WAIT_SECONDS = env.number("LLM_RATE_LIMIT_MAX_WAIT_SECONDS", 0.99, minimum=0.0)
LLM_RATE_LIMIT_WINDOW_SECONDS = env.number("LLM_RATE_LIMIT_WINDOW_SECONDS", 60.0, minimum=0.1)
# Send-to-arrival jitter: 0.25 s of a 60 s window costs 0.4 % of the limit.
LLM_RATE_LIMIT_MARGIN_SECONDS = env.number("LLM_RATE_LIMIT_MARGIN_SECONDS", 0.25, minimum=0.0)
LLM_RATE_LIMIT_BURST_SECONDS = env.number("LLM_RATE_LIMIT_BURST_SECONDS", 5.0, minimum=0.0)
LLM_RATE_LIMIT_BURST_RECOVERY_SECONDS = env.number(
    "LLM_RATE_LIMIT_BURST_RECOVERY_SECONDS", 600.0, minimum=0.001
)
LLM_RATE_LIMIT_SLOW_START = env.switch("LLM_RATE_LIMIT_SLOW_START", True)
LLM_RATE_LIMIT_BOOTSTRAP_CONCURRENCY = env.integer(
    "LLM_RATE_LIMIT_BOOTSTRAP_CONCURRENCY", 4, minimum=1
)
LLM_RATE_LIMIT_LEARNED_TTL_SECONDS = env.number(
    "LLM_RATE_LIMIT_LEARNED_TTL_SECONDS", 3600.0, minimum=60.0
)
LLM_RATE_LIMIT_CONFIG_CACHE_SECONDS = env.number(
    "LLM_RATE_LIMIT_CONFIG_CACHE_SECONDS", 5.0, minimum=0.0
)
LLM_FEATURE_WEIGHTS = env.json_value("LLM_FEATURE_WEIGHTS", {})
LLM_PRIORITY_FEATURES = frozenset(env.names("LLM_PRIORITY_FEATURES"))
LLM_USER_FAIR_SHARE = env.switch("LLM_USER_FAIR_SHARE", True)
LLM_USER_MAX_SHARE = env.number("LLM_USER_MAX_SHARE", 1.0)  # over 0, at most 1 (1: no cap)

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

# --- Alerts (checked in alerts/checks.py) -----------------------------------------------------
ALERT_SEVERITIES = ("WARNING", "ERROR", "CRITICAL")
ALERT_KINDS = alert_targets.KINDS
ALERT_ROUTES = env.json_value("ALERT_ROUTES", {})  # for a severity with no AlertRoute row at all
ALERT_PAGERDUTY_EVENTS_URL = env.str(
    "ALERT_PAGERDUTY_EVENTS_URL", "https://events.pagerduty.com/v2/enqueue"
)
ALERT_DEDUP_SECONDS = env.integer("ALERT_DEDUP_SECONDS", 600, minimum=0)
ALERT_RETRY_SCHEDULE = env.json_value("ALERT_RETRY_SCHEDULE", [5.0, 30.0, 120.0])
ALERT_DELIVERY_TIMEOUT = env.number("ALERT_DELIVERY_TIMEOUT", 10.0, minimum=0.1)
# Off in production: workers would post wherever a caller points them inside our network.
CALLBACK_ALLOW_PRIVATE_HOSTS = env.switch("CALLBACK_ALLOW_PRIVATE_HOSTS", DEBUG)
ALERT_QUEUE_WAIT_THRESHOLDS = env.json_value("ALERT_QUEUE_WAIT_THRESHOLDS", {LLM_QUEUE: 60.0})
# Resolve only under this fraction of the threshold: a queue hovering at it does not flap.
ALERT_QUEUE_CLEAR_RATIO = env.number("ALERT_QUEUE_CLEAR_RATIO", 0.5)
ALERT_MONITOR_INTERVAL = env.number("ALERT_MONITOR_INTERVAL", 15.0, minimum=0.1)
LOOP_ERROR_BACKOFF_SECONDS = env.number("LOOP_ERROR_BACKOFF_SECONDS", 1.0, minimum=0.01)
LOOP_ERROR_BACKOFF_MAX_SECONDS = env.number("LOOP_ERROR_BACKOFF_MAX_SECONDS", 30.0, minimum=0.01)
ALERT_SOURCE = env.str("ALERT_SOURCE", "llmops")  # PagerDuty's payload.source, e.g. llmops-prod

EMAIL_BACKEND = env.str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", "llmops-alerts@localhost")
EMAIL_HOST = env.str("EMAIL_HOST", "localhost")
EMAIL_PORT = env.integer("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env.str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env.str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env.switch("EMAIL_USE_TLS", False)
