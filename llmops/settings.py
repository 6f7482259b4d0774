"""Settings for the LLM job queue.

Every knob comes from an environment variable with a safe default; a value that cannot be read
raises ImproperlyConfigured at start-up instead of being silently ignored.
"""

import json
import os
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlparse

from django.core.exceptions import ImproperlyConfigured
from redis.exceptions import ConnectionError as RedisConnectionError

# Pure (no models): ALERT_ROUTES is checked by the same rule as the admin's AlertRoute.
from alerts import targets as alert_targets
from llmops.queues import ALERTS_QUEUE, DEFAULT_QUEUE, KEY_PREFIX, LLM_QUEUE

# Pure: the throttle rates' format.
from llmops.rates import parse_rate

# Pure (no models): the rate-limit settings' parsers.
from ratelimits import env_parsers as rate_limit_conf

BASE_DIR = Path(__file__).resolve().parent.parent


def envbool(name: str, default: str) -> bool:
    value = os.environ.get(name, default)
    if value in ("True", "true", "1", "yes"):
        return True
    if value in ("False", "false", "0", "no", ""):
        return False
    raise ImproperlyConfigured(f"{name} must be True or False, not {value!r}")


def envint(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, not {raw!r}") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {value}")
    return value


def envfloat(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a number, not {raw!r}") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {value}")
    return value


def envjson(name: str, default: Any) -> Any:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be JSON: {exc}") from exc


def database_from_url(url: str) -> dict[str, Any]:
    """sqlite:///path or mysql://user:password@host:port/name (MariaDB or MySQL)."""
    parsed = urlparse(url)
    if parsed.scheme == "sqlite":
        path = unquote(parsed.path[1:]) if parsed.path.startswith("/") else parsed.path
        return {
            "ENGINE": "django_prometheus.db.backends.sqlite3",
            "NAME": path or BASE_DIR / "db.sqlite3",
        }
    if parsed.scheme in ("mysql", "mariadb"):
        name = parsed.path.lstrip("/")
        if not name:
            raise ImproperlyConfigured("DATABASE_URL must name a database: mysql://user@host/name")
        return {
            "ENGINE": "django_prometheus.db.backends.mysql",
            "NAME": unquote(name),
            "USER": unquote(parsed.username or "root"),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "127.0.0.1",
            "PORT": str(parsed.port or 3306),
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
            "OPTIONS": {"charset": "utf8mb4", "isolation_level": "read committed"},
            "TEST": {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"},
        }
    raise ImproperlyConfigured(f"DATABASE_URL scheme {parsed.scheme!r} is not supported")


# --- Security ---------------------------------------------------------------------------------

DEBUG = envbool("DJANGO_DEBUG", "False")
"""Off unless asked for: `make run` turns it on for local development."""

SECURE = envbool("DJANGO_SECURE", "False")
"""The site is served over HTTPS only (production). Turns on the SSL redirect, secure cookies and
HSTS below, and requires a real DJANGO_SECRET_KEY and named DJANGO_ALLOWED_HOSTS. Off by default
because `make run` and the tests (Django's test client, live_server) speak plain http."""

DEVELOPMENT_SECRET_KEY = "dev-only-insecure-key-change-me-in-production"


def secret_key_from_env(name: str, *, debug: bool, secure: bool) -> str:
    value = os.environ.get(name, "")
    if not value:
        if secure:
            raise ImproperlyConfigured(f"{name} must be set when DJANGO_SECURE is on")
        if debug:
            return DEVELOPMENT_SECRET_KEY
        # DEBUG off and no key: a random key for this process only. Nothing can be forged with a
        # key printed in the source; sessions simply do not outlive the process.
        return secrets.token_urlsafe(50)
    # Django's own bar for a production key (check --deploy, security.W009).
    if secure and (len(value) < 50 or len(set(value)) < 5 or value == DEVELOPMENT_SECRET_KEY):
        raise ImproperlyConfigured(
            f"{name} must be at least 50 random characters when DJANGO_SECURE is on"
        )
    return value


def allowed_hosts_from_env(name: str, *, secure: bool) -> list[str]:
    hosts = [h.strip() for h in os.environ.get(name, "localhost,127.0.0.1,[::1]").split(",")]
    hosts = [h for h in hosts if h]
    # Answering any Host header lets a forged one into absolute URLs (password-reset links).
    if secure and (not hosts or "*" in hosts):
        raise ImproperlyConfigured(f"{name} must name the site's hosts when DJANGO_SECURE is on")
    return hosts


def proxy_ssl_header_from_env(name: str) -> tuple[str, str] | None:
    """HTTP_X_FORWARDED_PROTO (value https) or HTTP_X_FORWARDED_SSL,on: the header a
    TLS-terminating proxy sets, and strips from what clients send."""
    raw = os.environ.get(name, "")
    if not raw:
        return None
    header, _, value = raw.partition(",")
    header, value = header.strip().upper(), value.strip() or "https"
    if not header.startswith("HTTP_") or not header.replace("_", "").isalnum():
        raise ImproperlyConfigured(f"{name} must look like HTTP_X_FORWARDED_PROTO, not {raw!r}")
    return (header, value)


SECRET_KEY = secret_key_from_env("DJANGO_SECRET_KEY", debug=DEBUG, secure=SECURE)
ALLOWED_HOSTS = allowed_hosts_from_env("DJANGO_ALLOWED_HOSTS", secure=SECURE)
SECURE_PROXY_SSL_HEADER = proxy_ssl_header_from_env("DJANGO_SECURE_PROXY_SSL_HEADER")
SECURE_SSL_REDIRECT = envbool("DJANGO_SECURE_SSL_REDIRECT", str(SECURE))
# Load balancers and orchestrators probe over plain http inside the network: a redirect would
# pass for "healthy" without checking anything.
SECURE_REDIRECT_EXEMPT = [r"^(healthz|readyz)$"]
SESSION_COOKIE_SECURE = envbool("DJANGO_SESSION_COOKIE_SECURE", str(SECURE))
CSRF_COOKIE_SECURE = envbool("DJANGO_CSRF_COOKIE_SECURE", str(SECURE))
SECURE_HSTS_SECONDS = envint("DJANGO_SECURE_HSTS_SECONDS", 31_536_000 if SECURE else 0, minimum=0)
"""One year once the site is HTTPS-only; lower it (e.g. 3600) for a first deploy on a new host."""
# Subdomains of this site's own host name; preload only allows submitting it to browsers' lists.
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", str(SECURE))
SECURE_HSTS_PRELOAD = envbool("DJANGO_SECURE_HSTS_PRELOAD", str(SECURE))
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
# Django's defaults, spelled out because tests/test_security_headers.py holds them: scripts
# never see the session cookie; neither cookie rides along on another site's POST or subrequest
# (a top-level link to us keeps the session); other sites learn no path of ours from Referer; a
# page opened from ours cannot reach back into it. The CSRF cookie stays readable by scripts:
# the live page sends it back as X-CSRFToken (templates/jobs/live.html).
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_HTTPONLY = False
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
CSRF_TRUSTED_ORIGINS = [
    o for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "rest_framework",
    "rest_framework.authtoken",
    # The OpenAPI schema (/api/schema/) and its Swagger UI (/api/docs/), served from our own
    # static files (the sidecar ships Swagger UI's dist): no CDN, works without internet.
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_rq",
    "django_prometheus",
    "providers",
    "jobs",
    "ledger",
    "alerts",
    "dlq",
    "fake_provider",
    "ops",
    "metrics",
    "ratelimits",
    "batches",
    "pipelines",
]

MIDDLEWARE = [
    # First and last: django-prometheus times every request (HTTP metrics on /metrics).
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    # Early: a request id for every line the request logs, and one access-log line for it.
    "llmops.middleware.RequestLogMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "llmops.urls"
# The live page's sign-in (any active user; the admin's login is for staff only).
LOGIN_URL = "login"
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

DATABASES = {"default": database_from_url(os.environ.get("DATABASE_URL", "sqlite:///"))}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # Web and workers write concurrently; wait for the lock instead of failing at once.
    DATABASES["default"]["OPTIONS"] = {"timeout": 20, "transaction_mode": "IMMEDIATE"}

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
# The ASGI app serves static files itself (admin CSS) unless a front proxy does it.
SERVE_STATIC = envbool("DJANGO_SERVE_STATIC", "True")


def default_web_concurrency() -> int:
    # One per core. Under ASGI, Django already serves the requests of one process at once, each
    # on a thread of its own, so waits on MariaDB and Redis overlap within a process; what one
    # process cannot do is run Python on more than one core (the GIL). More processes than
    # cores only add memory (bench/submit.py).
    return len(os.sched_getaffinity(0))


WEB_CONCURRENCY = envint("WEB_CONCURRENCY", default_web_concurrency(), minimum=1)
"""Worker processes of the web server (llmops/web.py, the Procfile's web line)."""

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first so that an unauthenticated request answers 401 with WWW-Authenticate.
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["jobs.parsers.LimitedJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "EXCEPTION_HANDLER": "llmops.errors.exception_handler",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": envint("API_PAGE_SIZE", 50, minimum=1),
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}


def rate_from_env(name: str, default: str) -> str:
    value = os.environ.get(name) or default
    try:
        parse_rate(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from exc
    return value


LLM_SUBMIT_THROTTLE_RATE = rate_from_env("LLM_SUBMIT_THROTTLE_RATE", "600/min")
"""Submits per user, over every submit endpoint together (llmops/throttles.py SubmitThrottle),
counted in Redis for all web processes; `off` turns the throttle off. 600 a minute is ten a
second, sustained: far above a person or a normal integration, low enough that a runaway loop
is stopped at 429 before it fills the queue."""

# The schema and the docs page are public: they describe the API, hold no data and no secret,
# and every endpoint they list still asks for its token. /metrics, /healthz, /readyz, the admin
# and django-rq are not DRF views and are not in the schema (docs/operations.md covers them).
SPECTACULAR_SETTINGS = {
    "TITLE": "llmops API",
    "DESCRIPTION": (
        "LLM calls as background jobs: submit and poll jobs, the dead-letter queue, costs and "
        "budgets. Every error body is {code, message, detail} with a stable code (docs/api.md)."
    ),
    "VERSION": "1",
    # Operations tagged by the path segment after it: jobs, batches, pipelines, failures, costs...
    "SCHEMA_PATH_PREFIX": r"/api/v1/",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    # No authentication for the schema itself: a stale token in the browser must not hide it.
    "SERVE_AUTHENTICATION": [],
    # Request and response bodies as separate components: read-only fields are not inputs.
    "COMPONENT_SPLIT_REQUEST": True,
    # Two "status" choice sets: a job's, and a batch's (a pipeline's has the same values).
    "ENUM_NAME_OVERRIDES": {
        "JobStatusEnum": "jobs.models.LlmJob.Status",
        "BatchStatusEnum": "batches.models.Batch.Status",
    },
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- Redis and queues -------------------------------------------------------------------------

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
LLM_JOB_TIMEOUT = envint("LLM_JOB_TIMEOUT", 240, minimum=10)
"""The least RQ lets one LLM job run before killing it; a job whose call may take longer gets
its call's deadline plus LLM_JOB_TIMEOUT_MARGIN (jobs/timeouts.py)."""
LLM_JOB_TIMEOUT_MARGIN = envfloat("LLM_JOB_TIMEOUT_MARGIN", 30.0, minimum=1.0)

CHANNEL_LAYER_SOCKET_TIMEOUT = envfloat("CHANNEL_LAYER_SOCKET_TIMEOUT", 15.0, minimum=7.0)
"""Seconds a channel-layer Redis read may take: more than channels-redis's 5 s blocking receive,
which a shorter timeout cuts off (the socket then died 5 s after it went quiet)."""
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            # redis-py's default socket_timeout (5 s) equals channels-redis's blocking receive
            # (BZPOPMIN for 5 s): a quiet socket's read timed out and killed it. Reads get longer.
            "hosts": [
                {
                    "address": REDIS_URL,
                    "socket_timeout": CHANNEL_LAYER_SOCKET_TIMEOUT,
                    "socket_connect_timeout": 5,
                    "socket_keepalive": True,
                    # Once more on a new connection: after a Redis restart every pooled one is
                    # dead, and each failed its next command (an event lost, a receive retried).
                    "retry_on_error": [RedisConnectionError],
                }
            ],
            "prefix": KEY_PREFIX + "channels:",
            # Messages waiting for one web process's sockets before group_send drops the newest
            # (silently): its sockets take them at once; a slow client's backlog is bounded in
            # bytes by WS_MAX_QUEUED_BYTES (jobs/consumers.py).
            "capacity": envint("CHANNEL_LAYER_CAPACITY", 1000, minimum=100),
            # Seconds an undelivered message waits for its socket: job events are stale after
            # that, and a client catches up with GET /api/v1/jobs/<id>/.
            "expiry": envint("CHANNEL_LAYER_EXPIRY", 60, minimum=5),
            # Group membership lasts a day: consumers re-join on reconnect.
            "group_expiry": 86400,
        },
    }
}
JOB_EVENTS_PUBLISH_TIMEOUT = envfloat("JOB_EVENTS_PUBLISH_TIMEOUT", 1.0, minimum=0.05)
"""Seconds a transition waits, at most, for its WebSocket event to be handed to the channel
layer (jobs/events.py); an outage costs each transition this much, never a failure."""

RQ = {"WORKER_CLASS": "llmops.workers.LlmWorker"}
LLM_WORKER_CONCURRENCY = envint("LLM_WORKER_CONCURRENCY", 32, minimum=1)
"""Jobs one `rqworker llm` process runs at once, each on a thread (llmops/threaded_worker.py);
1 = rq's forking worker, one job per process. A job costs its process ~25 ms of CPU around a call
that waits seconds on the network (bench/concurrency.py), so 32 calls of 5-10 s use about a
tenth of a core, and one process serves at most ~40 calls/s (its one core, the GIL): past
latency x 40 calls per process, add processes rather than threads."""
LLM_WORKER_DB_CONNECTIONS = envint("LLM_WORKER_DB_CONNECTIONS", 8, minimum=1)
"""Threads of one threaded worker process that may hold database connections at once: they take
turns, and a thread waiting on the provider holds none (llmops/db_connections.py). A thread
making a missing metrics counter row opens a second connection for a moment
(metrics/counters.py)."""
WORKER_NICE = envint("WORKER_NICE", 10, minimum=0)
"""The niceness every rq worker process takes at start (os.nice; its forks and threads inherit
it), so that on a host shared with the web processes a burst of work never takes the CPU from the
API: submits keep their latency whatever the workers do (bench/submit.py). 0: unchanged."""
LLM_WORKER_DB_SLOT_WAIT_SECONDS = envfloat("LLM_WORKER_DB_SLOT_WAIT_SECONDS", 60.0, minimum=0.1)
"""The longest a worker thread waits for one of those slots before its database work fails (as
in a database outage: a recording is retried, the job is left to the reconciler)."""
LLM_REDIS_SOCKET_TIMEOUT = envfloat("LLM_REDIS_SOCKET_TIMEOUT", 10.0, minimum=3.0)
"""Seconds a Redis command of the queues, the workers and the job path waits for its answer
(a dead link or a hung server), above the threaded worker's one-second blocking dequeue. rq's
forking worker raises it for its own connection to cover its long blocking dequeue (~7 min)."""
LLM_REDIS_CONNECT_TIMEOUT = envfloat("LLM_REDIS_CONNECT_TIMEOUT", 5.0, minimum=0.1)


def _with_socket_timeouts(url: str) -> str:
    """``url`` with redis-py's socket timeouts as query options (django-rq passes nothing else
    for a URL), unless the URL names its own. Not for CHANNEL_LAYERS: a WebSocket's channel-layer
    receive blocks for as long as the socket is quiet."""
    parts = urlparse(url)
    options = dict(parse_qsl(parts.query))
    options.setdefault("socket_timeout", f"{LLM_REDIS_SOCKET_TIMEOUT:g}")
    options.setdefault("socket_connect_timeout", f"{LLM_REDIS_CONNECT_TIMEOUT:g}")
    return parts._replace(query=urlencode(options)).geturl()


RQ_REDIS_URL = _with_socket_timeouts(REDIS_URL)
RQ_QUEUES = {
    LLM_QUEUE: {"URL": RQ_REDIS_URL, "DEFAULT_TIMEOUT": LLM_JOB_TIMEOUT},
    DEFAULT_QUEUE: {"URL": RQ_REDIS_URL, "DEFAULT_TIMEOUT": 300},
    ALERTS_QUEUE: {"URL": RQ_REDIS_URL, "DEFAULT_TIMEOUT": 60},
}

# --- Provider ---------------------------------------------------------------------------------

ANTHROPIC_API_KEY = os.environ.get("ANTHROPIC_API_KEY", "")
FAKE_PROVIDER_URL = os.environ.get("FAKE_PROVIDER_URL", "http://127.0.0.1:8787")
# An explicit base URL always wins; with no key the local fake provider stands in.
ANTHROPIC_BASE_URL = os.environ.get("ANTHROPIC_BASE_URL") or (
    "https://api.anthropic.com" if ANTHROPIC_API_KEY else FAKE_PROVIDER_URL
)
LLM_PROVIDER_READ_TIMEOUT = envfloat("LLM_PROVIDER_READ_TIMEOUT", 60.0, minimum=0.1)
"""The least read timeout of a call; longer max_tokens get longer ones (jobs/timeouts.py)."""
LLM_READ_TIMEOUT_SCALE = envfloat("LLM_READ_TIMEOUT_SCALE", 1.0, minimum=0.0)
"""Multiplies the expected generation time (the SDK's: 1 hour per 128k output tokens)."""
LLM_PROVIDER_CONNECT_TIMEOUT = envfloat("LLM_PROVIDER_CONNECT_TIMEOUT", 10.0, minimum=0.1)
if LLM_PROVIDER_READ_TIMEOUT >= LLM_JOB_TIMEOUT:
    raise ImproperlyConfigured("LLM_PROVIDER_READ_TIMEOUT must stay below LLM_JOB_TIMEOUT")

# --- Jobs and retries -------------------------------------------------------------------------

LLM_MAX_REQUEST_BYTES = envint("LLM_MAX_REQUEST_BYTES", 1024 * 1024, minimum=1024)
"""Largest request body (413 request_too_large above it) of every endpoint, API or not, except
those whose parser names a larger setting of its own (llmops/body_limits.py)."""
WS_MAX_MESSAGE_BYTES = envint("WS_MAX_MESSAGE_BYTES", 16 * 1024, minimum=1024)
"""Largest WebSocket message a client may send (uvicorn's --ws-max-size, llmops/web.py; the
socket is then closed with 1009). /ws/jobs/ is server-to-client: a client has nothing to say."""
WS_REAUTH_SECONDS = envfloat("WS_REAUTH_SECONDS", 5.0, minimum=0.1)
"""How often an open /ws/jobs/ socket checks again, as at connect, that its token or session,
user and permissions still grant it (closed 4401/4403 if not), and renews its channel-layer group
and its place among its user's connections (jobs/consumers.py): one small query each."""
WS_MAX_QUEUED_BYTES = envint("WS_MAX_QUEUED_BYTES", 1024 * 1024, minimum=128 * 1024)
"""Bytes of events one socket may have waiting for a client that reads slowly; past it the socket
is closed (4413) and the client catches up over the REST API. A completion event is up to ~85 KB."""
WS_MAX_CONNECTIONS_PER_USER = envint("WS_MAX_CONNECTIONS_PER_USER", 20, minimum=1)
"""Open /ws/jobs/ sockets one user may hold across every web process; one more is closed 4429."""
LLM_BATCH_MAX_ITEMS = envint("LLM_BATCH_MAX_ITEMS", 10_000, minimum=1)
"""Most items in one batch (POST /api/v1/batches/)."""
LLM_BATCH_MAX_REQUEST_BYTES = envint("LLM_BATCH_MAX_REQUEST_BYTES", 16 * 1024 * 1024, minimum=1024)
"""Largest batch body: 10,000 items of about 1.6 KB each. The web process holds the parsed body
(several times its size) while it works, so a bigger one wants several batches instead."""
LLM_BATCH_PROGRESS_INTERVAL = envfloat("LLM_BATCH_PROGRESS_INTERVAL", 1.0, minimum=0.0)
"""Seconds between two batch.progress events of one batch from one process (batches/events.py);
the last change of an interval is always sent at its end."""
DATA_UPLOAD_MAX_MEMORY_SIZE = max(LLM_MAX_REQUEST_BYTES + 1, 2_621_440)
LLM_MAX_ATTEMPTS = envint("LLM_MAX_ATTEMPTS", 10, minimum=1)
PIPELINE_MAX_STEPS = envint("PIPELINE_MAX_STEPS", 20, minimum=1)
"""Most steps in one pipeline (pipelines/validation.py). Steps run one after the other, each a
provider call of seconds to minutes, so 20 is already a long chain; the body is bounded by
LLM_MAX_REQUEST_BYTES as well."""
LLM_RETRY_SCHEDULES: dict[str, list[float]] = envjson("LLM_RETRY_SCHEDULES", {})
"""Overrides per failure class, e.g. {"overloaded": [15, 60, 180]}; see jobs/retry_policy.py."""
LLM_RETRY_JITTER = envfloat("LLM_RETRY_JITTER", 0.30, minimum=0.0)
LLM_CONCURRENCY_PER_KEY = envint("LLM_CONCURRENCY_PER_KEY", 1, minimum=1)
"""At most this many jobs with the same concurrency_key run at once (Laravel's
WithoutOverlapping for one document or customer); the others wait without using an attempt."""
LLM_CONCURRENCY_KEY_WAIT_SECONDS = envfloat("LLM_CONCURRENCY_KEY_WAIT_SECONDS", 2.0, minimum=0.1)
"""A job whose concurrency_key is busy tries again after this long (plus up to half of it, at
random, so that waiting jobs do not all come back at once)."""
LLM_RETRY_DELAY_SCALE = envfloat("LLM_RETRY_DELAY_SCALE", 1.0, minimum=0.0)
LLM_HEARTBEAT_SECONDS = envfloat("LLM_HEARTBEAT_SECONDS", 10.0, minimum=0.1)
"""A running job's lock lives four heartbeats (40 s), refreshed every beat."""
LLM_STALE_AFTER_SECONDS = envfloat("LLM_STALE_AFTER_SECONDS", 45.0, minimum=1.0)
"""A running job whose heartbeat is older than this (and whose lock is gone) was lost; a worker
whose heartbeat is older than this is dead, and the jobs it took and had not claimed go back."""
LLM_LOST_QUEUE_GRACE_SECONDS = envfloat("LLM_LOST_QUEUE_GRACE_SECONDS", 30.0, minimum=0.0)
"""A queued job missing from Redis for longer than this is enqueued again."""
LLM_RECONCILE_INTERVAL = envfloat("LLM_RECONCILE_INTERVAL", 15.0, minimum=0.1)
LLM_OVERDUE_RETRY_SECONDS = envfloat("LLM_OVERDUE_RETRY_SECONDS", 15.0, minimum=0.0)
"""A retrying job this far past its next_attempt_at is enqueued by the reconciler, even if its
scheduled RQ job exists (the worker holding rq's scheduler may be dead). rq's scheduler polls
every second; 15 s is many of its intervals. With the defaults a job whose worker was killed with
-9 calls the provider again within two minutes: at worst stale 45 s + reconcile 15 s + retry
delay 3-4 s + overdue 15 s + reconcile 15 s, about 94 s."""
LLM_RECORD_RETRY_SECONDS = envfloat("LLM_RECORD_RETRY_SECONDS", 60.0, minimum=0.0)
"""How long a worker keeps trying to record a finished call while the database is down."""
LLM_BREAKER_ENABLED = envbool("LLM_BREAKER_ENABLED", "True")
"""Account-wide failures (401, 402, 403, spend cap, credit balance) stop dispatch (jobs/breaker.py).
Off: each job dead-letters on its own, as a plain fatal failure."""
LLM_BREAKER_PROBE_SECONDS = envfloat("LLM_BREAKER_PROBE_SECONDS", 30.0, minimum=1.0)
"""While the provider circuit breaker is open, one job is let through this often as a probe: one
call every 30 s is no load, and dispatch resumes by itself within about a minute of the account
being fixed. A failed probe dead-letters only its own job (its alert folds into the open one)."""
LLM_OVERDUE_RETRY_ALERT_SECONDS = envfloat("LLM_OVERDUE_RETRY_ALERT_SECONDS", 120.0, minimum=0.0)
"""A WARNING when a retrying job's next attempt is this many seconds overdue: no scheduler runs,
or the llm workers are far behind."""

# --- Rate limits (ratelimits/) ----------------------------------------------------------------

LLM_RATE_LIMIT_ENABLED = envbool("LLM_RATE_LIMIT_ENABLED", "True")
"""The shared rate limiter decides when each provider call may start (ratelimits/). Off: calls
start at once and a 429 is only the retry policy's business."""
LLM_RATE_LIMITS = rate_limit_conf.rate_limits_from_env("LLM_RATE_LIMITS")
"""Configured limits per model id (or "*"), e.g. {"claude-sonnet-4-6": {"rpm": 4000,
"input_tpm": 2000000, "output_tpm": 400000}}. Admin rows win over these; the provider's own
limits, learned from its headers, cap both. Empty: the learned limits alone."""
LLM_RATE_LIMIT_MAX_WAIT_SECONDS = envfloat("LLM_RATE_LIMIT_MAX_WAIT_SECONDS", 0.99, minimum=0.0)
"""A worker waits in process at most this long for a slot; a job facing a longer wait goes back
on the queue until its slot (job_hold: no attempt used). Just under a second: the shortest
pause the provider asks for (retry-after: 1, in whole seconds) has always begun to run by the
time another worker asks, so it is waited out in process, not through the queue."""
LLM_RATE_LIMIT_WINDOW_SECONDS = envfloat("LLM_RATE_LIMIT_WINDOW_SECONDS", 60.0, minimum=0.1)
"""The window the provider's per-minute limits apply to; shorter only to compress time in tests
(with the fake provider's rate_window_seconds to match)."""
LLM_RATE_LIMIT_MARGIN_SECONDS = envfloat("LLM_RATE_LIMIT_MARGIN_SECONDS", 0.25, minimum=0.0)
"""A call counts this much longer than the window: the time between our send and the provider's
arrival stamp varies by some milliseconds, and a call must not leave our window before it
leaves the provider's (0.25 s of 60 costs 0.4 % of the limit)."""
LLM_RATE_LIMIT_BURST_SECONDS = envfloat("LLM_RATE_LIMIT_BURST_SECONDS", 5.0, minimum=0.0)
"""Admissions are paced at the request limit's rate (R per window, one every window/R) with a
burst of at most this many seconds' worth of it (at least one call): a provider that enforces
its per-minute limit over shorter intervals sees no minute's budget spent at once. A window's
worth or more: no pacing, the sliding window alone."""
LLM_RATE_LIMIT_BURST_RECOVERY_SECONDS = envfloat(
    "LLM_RATE_LIMIT_BURST_RECOVERY_SECONDS", 600.0, minimum=0.001
)
"""After a 429 whose headers still showed room (the provider enforces a shorter interval), the
burst is one call; it doubles after each this many seconds without another such 429, up to
LLM_RATE_LIMIT_BURST_SECONDS. Each probe too far costs about one 429 (docs/operations.md)."""
LLM_RATE_LIMIT_SLOW_START = envbool("LLM_RATE_LIMIT_SLOW_START", "True")
"""A limiter that starts pacing (a fresh start, a Redis flush, a limit first learned) starts with
a burst of one call, doubling every LLM_RATE_LIMIT_BURST_RECOVERY_SECONDS: its first burst does
not meet a provider that enforces short intervals with many calls at once."""
LLM_RATE_LIMIT_BOOTSTRAP_CONCURRENCY = envint("LLM_RATE_LIMIT_BOOTSTRAP_CONCURRENCY", 4, minimum=1)
"""With nothing configured and no answer seen yet for a model, at most this many calls are in
flight: the first answers carry the provider's limits."""
LLM_RATE_LIMIT_LEARNED_TTL_SECONDS = envfloat(
    "LLM_RATE_LIMIT_LEARNED_TTL_SECONDS", 3600.0, minimum=60.0
)
"""Learned limits are forgotten this long after the last answer that carried them."""
LLM_RATE_LIMIT_CONFIG_CACHE_SECONDS = envfloat(
    "LLM_RATE_LIMIT_CONFIG_CACHE_SECONDS", 5.0, minimum=0.0
)
"""Each process reads the admin's rate-limit rows this often: an edit applies within it."""
LLM_FEATURE_WEIGHTS = rate_limit_conf.feature_weights_from_env("LLM_FEATURE_WEIGHTS")
"""Shares of each limit between features that want calls at the same time, e.g.
{"email-classify": 4, "summarize": 1}; features not named weigh 1. Work-conserving: a feature
with nothing waiting leaves its share to the others."""
LLM_PRIORITY_FEATURES = rate_limit_conf.priority_features_from_env("LLM_PRIORITY_FEATURES")
"""Comma-separated features whose jobs go to the front of the llm queue (interactive work that
must not wait behind a batch), e.g. email-classify,chat."""
LLM_USER_FAIR_SHARE = envbool("LLM_USER_FAIR_SHARE", "True")
"""Users that want calls at the same time share each limit equally, work-conserving: one user
alone (a single-user install) still gets the whole limit."""
LLM_USER_MAX_SHARE = rate_limit_conf.share_from_env("LLM_USER_MAX_SHARE", 1.0)
"""A hard cap: no user ever takes more than this fraction of a limit, even alone (1: no cap)."""

# --- Budgets ----------------------------------------------------------------------------------

LEDGER_FORECAST_WINDOW_HOURS = envfloat("LEDGER_FORECAST_WINDOW_HOURS", 24.0, minimum=0.1)
"""A budget's burn rate is its ledger spend over this many recent hours (a day budget: never
before the start of its day); ledger/forecast.py projects the window's end from it."""

# --- Observability ----------------------------------------------------------------------------

METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")
"""Bearer token that /metrics and /django-rq/metrics/ answer to; empty: no token is accepted."""
METRICS_ALLOWED_NETWORKS = [
    network.strip()
    for network in os.environ.get("METRICS_ALLOWED_NETWORKS", "").split(",")
    if network.strip()
]
"""Comma-separated networks (CIDR) whose callers may scrape without the token; empty: none."""

# --- Demo -------------------------------------------------------------------------------------

DEMO_USERNAME = os.environ.get("DEMO_USERNAME", "demo")
DEMO_PASSWORD = os.environ.get("DEMO_PASSWORD", "llmops-demo")

LOG_FORMAT = os.environ.get("LOG_FORMAT", "json")
"""json: one JSON object per line with job_id, feature, model, attempt, request_id where known
(llmops/logs.py); plain: the human format with the same fields appended."""
if LOG_FORMAT not in ("json", "plain"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be json or plain, not {LOG_FORMAT!r}")
LOG_LEVEL = os.environ.get("LOG_LEVEL", "INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {"()": "llmops.logs.JsonFormatter"},
        "plain": {"()": "llmops.logs.PlainFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    # One handler for everything: rq's worker and scheduler loggers find it and add none of
    # their own (rq.logutils.setup_loghandlers), uvicorn's and Django's loggers propagate to it.
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
        # The SDK's DEBUG lines hold whole request bodies (prompts) even when LOG_LEVEL=DEBUG.
        "anthropic": {"level": "WARNING"},
        # Django's defaults print to their own console handler under DEBUG, uvicorn's to its
        # own plain one: here they propagate to ours (and take LOG_LEVEL, not --log-level).
        "django": {"handlers": [], "propagate": True},
        "django.server": {"handlers": [], "propagate": True},
        "uvicorn": {"handlers": [], "propagate": True},
        # Off: llmops.access (llmops/middleware.py) logs each request once, with its request id.
        "uvicorn.access": {"handlers": [], "propagate": False},
    },
}

# --- Alerts -----------------------------------------------------------------------------------

ALERT_SEVERITIES = ("WARNING", "ERROR", "CRITICAL")
ALERT_KINDS = alert_targets.KINDS


def alert_routes_from_env(name: str) -> dict[str, list[dict[str, str]]]:
    """ALERT_ROUTES: {"<SEVERITY>": [{"kind": ..., "target": ..., "name": ...}, ...]}.

    Errors say where the bad entry is, never what its target is: targets are secrets.
    """
    value = envjson(name, {})
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object keyed by severity")
    routes: dict[str, list[dict[str, str]]] = {}
    for severity, destinations in value.items():
        if severity not in ALERT_SEVERITIES:
            raise ImproperlyConfigured(
                f"{name}: unknown severity {severity!r}; use {', '.join(ALERT_SEVERITIES)}"
            )
        if not isinstance(destinations, list):
            raise ImproperlyConfigured(f"{name}[{severity}] must be a list of destinations")
        checked = []
        for index, destination in enumerate(destinations):
            where = f"{name}[{severity}][{index}]"
            if not isinstance(destination, dict) or set(destination) - {"kind", "target", "name"}:
                raise ImproperlyConfigured(f"{where} must be an object with kind, target, name")
            kind, target = destination.get("kind"), destination.get("target")
            if kind not in ALERT_KINDS:
                raise ImproperlyConfigured(
                    f"{where}: unknown kind {kind!r}; use {', '.join(ALERT_KINDS)}"
                )
            if not isinstance(target, str) or not target.strip():
                raise ImproperlyConfigured(f"{where}: target must be a non-empty string")
            problem = alert_targets.target_problem(kind=kind, target=target)
            if problem:
                raise ImproperlyConfigured(f"{where}: bad {kind} target: {problem}")
            checked.append(
                {"kind": kind, "target": target.strip(), "name": str(destination.get("name", ""))}
            )
        routes[severity] = checked
    return routes


def alert_retry_schedule_from_env(name: str) -> list[float]:
    value = envjson(name, [5, 30, 120])
    if not isinstance(value, list) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        raise ImproperlyConfigured(f"{name} must be a JSON list of seconds, e.g. [5, 30, 120]")
    return [float(v) for v in value]


def queue_wait_thresholds_from_env(name: str) -> dict[str, float]:
    value = envjson(name, {LLM_QUEUE: 60})
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object: {{queue: seconds}}")
    for queue, seconds in value.items():
        if queue not in RQ_QUEUES:
            raise ImproperlyConfigured(f"{name}: unknown queue {queue!r}; see RQ_QUEUES")
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
            raise ImproperlyConfigured(f"{name}[{queue}] must be a number of seconds >= 0")
    return {queue: float(seconds) for queue, seconds in value.items()}


def queue_clear_ratio_from_env(name: str) -> float:
    value = envfloat(name, 0.5)
    # 0 would never clear while a job waits; above 1 would clear while still over the threshold.
    if not 0 < value <= 1:
        raise ImproperlyConfigured(f"{name} must be over 0 and at most 1, not {value}")
    return value


ALERT_ROUTES = alert_routes_from_env("ALERT_ROUTES")
"""Default destinations per severity, used for a severity that has no AlertRoute row at all."""
ALERT_PAGERDUTY_EVENTS_URL = os.environ.get(
    "ALERT_PAGERDUTY_EVENTS_URL", "https://events.pagerduty.com/v2/enqueue"
)
ALERT_DEDUP_SECONDS = envint("ALERT_DEDUP_SECONDS", 600, minimum=0)
"""The same fingerprint within this many seconds of the last sent alert is counted, not sent."""
ALERT_RETRY_SCHEDULE = alert_retry_schedule_from_env("ALERT_RETRY_SCHEDULE")
"""Delays in seconds before retry n of one delivery; it is recorded failed after the last."""
ALERT_DELIVERY_TIMEOUT = envfloat("ALERT_DELIVERY_TIMEOUT", 10.0, minimum=0.1)
CALLBACK_ALLOW_PRIVATE_HOSTS = envbool("CALLBACK_ALLOW_PRIVATE_HOSTS", str(DEBUG))
"""Let an API consumer's callback URL (a batch's) reach private, loopback and link-local hosts.
Off in production: the workers would post wherever a caller points them inside our network. On
with DJANGO_DEBUG (make run), so that a local receiver works."""
ALERT_QUEUE_WAIT_THRESHOLDS = queue_wait_thresholds_from_env("ALERT_QUEUE_WAIT_THRESHOLDS")
"""Per queue: a WARNING when its oldest waiting job has waited longer than this many seconds."""
ALERT_QUEUE_CLEAR_RATIO = queue_clear_ratio_from_env("ALERT_QUEUE_CLEAR_RATIO")
"""The wait alert resolves only under this fraction of the threshold (or when nothing waits):
in between nothing changes, so a queue hovering at its threshold does not flap."""
ALERT_MONITOR_INTERVAL = envfloat("ALERT_MONITOR_INTERVAL", 15.0, minimum=0.1)
LOOP_ERROR_BACKOFF_SECONDS = envfloat("LOOP_ERROR_BACKOFF_SECONDS", 1.0, minimum=0.01)
"""After a failed pass a loop command waits this long, doubled on each further failure..."""
LOOP_ERROR_BACKOFF_MAX_SECONDS = envfloat("LOOP_ERROR_BACKOFF_MAX_SECONDS", 30.0, minimum=0.01)
"""...up to this, or the loop's interval if shorter; then it tries again with fresh connections."""
ALERT_SOURCE = os.environ.get("ALERT_SOURCE", "llmops")
"""Names this deployment in alerts (PagerDuty payload.source), e.g. llmops-prod."""

EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "llmops-alerts@localhost")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = envint("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", "False")
