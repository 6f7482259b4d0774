"""The ops dashboard over a million ledger rows: how long the page and its data.json take.

    make bench-dashboard                       # 1,000,000 ledger rows and their jobs, 30 days
    BENCH_DASHBOARD_ROWS=200000 make bench-dashboard
    BENCH_DASHBOARD_REUSE=1 make bench-dashboard   # time again on the last run's data

Uses its own MariaDB database (BENCH_DASHBOARD_DATABASE_URL, default
mysql://root@127.0.0.1:3306/llmops_bench_dashboard, recreated and migrated) and only reads Redis
(REDIS_URL as the app reads it: queue depths, workers and rq's registries). It writes a month of
traffic ending now, as the runner would have left it: one job per 1.19 ledger rows (88 % of jobs
succeed at once, 10 % after retries, 2 % are dead-lettered with their DLQ record), each attempt a
ledger row at the moment it ended, the budget windows the ledger writes keep, and a breaker row.
Jobs, ledger rows and DLQ records go in with LOAD DATA LOCAL INFILE (secondary indexes dropped
for the load and rebuilt as the migrations made them, then ANALYZE TABLE), the rest through the
ORM. Then it asks for the page and for data.json over each window through Django's test client
as a signed-in staff member (the whole view: session, admin_view, every query, JSON encoding),
and prints the median and the slowest of BENCH_RUNS runs, and every query of the slowest
data.json with its time and the indexes EXPLAIN shows.
"""

import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ROWS = int(os.environ.get("BENCH_DASHBOARD_ROWS", "1000000"))
DAYS = int(os.environ.get("BENCH_DASHBOARD_DAYS", "30"))
"""A month: the 24 h window holds ~33,000 ledger rows and the 14-day cost chart ~470,000."""
RUNS = int(os.environ.get("BENCH_RUNS", "5"))
REUSE = os.environ.get("BENCH_DASHBOARD_REUSE") == "1"
DATABASE_URL = os.environ.get(
    "BENCH_DASHBOARD_DATABASE_URL", "mysql://root@127.0.0.1:3306/llmops_bench_dashboard"
)
USERS = 8
FEATURES = ["summarize", "classify", "extract", "translate", "chat", "moderate"]
MODELS = ["claude-haiku-4-5", "claude-sonnet-4-6", "claude-opus-4-1"]
ATTEMPTS = [(1, 0.88), (2, 0.07), (3, 0.03), (4, 0.02)]
"""Provider attempts per job and how often: 1.19 ledger rows per job on average."""
DEAD_LETTERED = 0.02
SEVERITIES = [("ERROR", 0.7), ("WARNING", 0.2), ("CRITICAL", 0.1)]
REASONS = ["overloaded", "server_error", "rate_limited", "context_too_long", "invalid_request"]
SHORT = {
    "ledger_costentry": "ledger",
    "alerts_failurerecord": "failures",
    "jobs_llmjob": "jobs",
    "jobs_providerbreaker": "breaker",
    "ledger_budget": "budget",
    "ledger_budgetwindow": "window",
    "ledger_budgetreservation": "reservation",
    "auth_user": "users",
    "django_session": "session",
}
LOADED_TABLES = ["jobs_llmjob", "ledger_costentry", "alerts_failurerecord"]


def mysql(database: str, sql: str, *extra: str) -> str:
    host = DATABASE_URL.split("@", 1)[1].split("/", 1)[0]
    hostname, _, port = host.partition(":")
    args = ["mysql", f"-h{hostname}", f"-P{port or 3306}", "-uroot", *extra]
    return subprocess.run(
        [*args, database, "-e", sql], check=True, capture_output=True, text=True
    ).stdout


def main() -> None:
    name = DATABASE_URL.rsplit("/", 1)[-1]
    env = {
        **os.environ,
        "DATABASE_URL": DATABASE_URL,
        "LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "llmops.settings",
    }
    os.environ.update(env)
    if not REUSE:
        mysql(
            "", f"DROP DATABASE IF EXISTS `{name}`; CREATE DATABASE `{name}` CHARACTER SET utf8mb4"
        )
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True
        )

    import django

    django.setup()
    from django.test.utils import setup_test_environment

    setup_test_environment()  # the test client's host, "testserver", is allowed
    from ledger.models import CostEntry

    if REUSE:
        from django.db.models import Max

        latest = CostEntry.objects.aggregate(latest=Max("created_at"))["latest"]
        print(
            f"ledger: {CostEntry.objects.count():,} rows (reused; newest {latest:%Y-%m-%d %H:%M})"
        )
    else:
        load(name, datetime.now(UTC).replace(microsecond=0))
    time_dashboard()


# --- Loading ------------------------------------------------------------------------------------


def _choice(rng: random.Random, weighted: list[tuple[Any, float]]) -> Any:
    return rng.choices([value for value, _ in weighted], [weight for _, weight in weighted])[0]


def _ts(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")


def load(name: str, now: datetime) -> None:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.db.models import Q, Sum

    from jobs.models import LlmJob, ProviderBreaker
    from ledger.budgets import window_bounds
    from ledger.models import Budget, BudgetWindow, CostEntry

    rng = random.Random(7)
    started = time.perf_counter()
    User = get_user_model()
    users = User.objects.bulk_create([User(username=f"user{i}") for i in range(USERS)])
    user_ids = [user.id for user in users]

    def key(value: uuid.UUID) -> str:
        return str(CostEntry._meta.pk.get_db_prep_value(value, connection))  # type: ignore[union-attr]

    jobs: list[str] = []
    ledger: list[str] = []
    failures: list[str] = []
    span = DAYS * 86400 - 900
    while len(ledger) < ROWS:
        job_id = key(uuid.uuid4())
        user_id, feature, model = rng.choice(user_ids), rng.choice(FEATURES), rng.choice(MODELS)
        attempts = _choice(rng, ATTEMPTS)
        dead = rng.random() < DEAD_LETTERED
        # Ends at least a quarter of an hour ago, so no attempt ends in the future.
        created = now - timedelta(seconds=900 + rng.uniform(0, span))
        enqueued = created + timedelta(milliseconds=rng.uniform(2, 20))
        first_start = moment = enqueued + timedelta(seconds=rng.expovariate(1 / 0.8))
        cost_total = Decimal(0)
        for attempt in range(1, attempts + 1):
            latency = rng.uniform(0.4, 12)
            moment += timedelta(seconds=latency)
            success = attempt == attempts and not dead
            input_tokens = rng.randint(50, 4000) if success else 0
            output_tokens = rng.randint(10, 800) if success else 0
            cost = Decimal(input_tokens * 3 + output_tokens * 15) / Decimal(1_000_000)
            cost_total += cost
            ledger.append(
                "\t".join(
                    [
                        key(uuid.uuid4()), job_id, str(attempt), "attempt", r"\N", feature, model,
                        str(user_id), r"\N", "success" if success else "error_response",
                        "200" if success else "529", "" if success else "overloaded", "", "", "",
                        str(input_tokens), str(output_tokens), "0", "0", "0", f"{cost:.6f}", "0",
                        str(int(latency * 1000)), r"\N", _ts(moment),
                    ]
                )
            )  # fmt: skip
            if attempt < attempts:
                moment += timedelta(seconds=rng.uniform(2, 30) + rng.expovariate(1 / 0.5))
        if dead:
            failures.append(
                "\t".join(
                    [
                        job_id, _choice(rng, SEVERITIES), rng.choice(REASONS),
                        str(int(attempts > 1)), "529", "OverloadedError", "overloaded", "",
                        str(attempts), "{}",
                        "open" if rng.random() < 0.1 else rng.choice(["resolved", "ignored"]),
                        _ts(moment), _ts(moment), "", "", r"\N",
                    ]
                )
            )  # fmt: skip
        status = "failed" if dead else "completed"
        jobs.append(
            "\t".join(
                [
                    job_id, str(user_id), feature, model, status,
                    '[{"role": "user", "content": "Summarise this ticket."}]', r"\N", "512", r"\N",
                    "{}", r"\N", r"\N", "bench", str(attempts), str(attempts), "{}", "",
                    _ts(created), _ts(enqueued), _ts(first_start), _ts(moment), _ts(moment),
                    r"\N", r"\N" if dead else "Done.", "" if dead else "end_turn",
                    str(input_tokens), str(output_tokens), "0", "0", f"{cost_total:.6f}",
                    "overloaded" if dead else "", "529" if dead else r"\N", "",
                    "ERROR" if dead else "",
                ]
            )
        )  # fmt: skip
    ledger = ledger[:ROWS]
    # A few jobs still waiting or running, as a live system has.
    for status, count in [("queued", 40), ("retrying", 12), ("running", 6)]:
        for _ in range(count):
            moment = now - timedelta(seconds=rng.uniform(1, 120))
            jobs.append(
                "\t".join(
                    [
                        key(uuid.uuid4()), str(rng.choice(user_ids)), rng.choice(FEATURES),
                        rng.choice(MODELS), status, '[{"role": "user", "content": "Hi."}]', r"\N",
                        "512", r"\N", "{}", r"\N", r"\N", "bench", "0", "0", "{}", "",
                        _ts(moment), _ts(moment), r"\N", _ts(moment), r"\N", r"\N", r"\N", "",
                        r"\N", r"\N", r"\N", r"\N", "0", "", r"\N", "", "",
                    ]
                )
            )  # fmt: skip
    generated = time.perf_counter() - started
    files = {}
    for table, rows in [
        ("jobs_llmjob", jobs),
        ("ledger_costentry", ledger),
        ("alerts_failurerecord", failures),
    ]:
        rows.sort()  # by primary key (InnoDB clusters on it); records sort by job, no harm
        with tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False) as file:
            file.write("\n".join(rows) + "\n")
        files[table] = file.name
    counts = {"jobs": len(jobs), "ledger": len(ledger), "failures": len(failures)}
    del jobs, ledger, failures
    columns = {
        "jobs_llmjob": [
            "id", "user_id", "feature", "model", "status", "messages", "system", "max_tokens",
            "temperature", "metadata", "idempotency_key", "idempotency_key_hash",
            "request_fingerprint", "attempts", "budget_attempts", "retry_counts", "rq_job_id",
            "created_at", "enqueued_at", "started_at", "heartbeat_at", "completed_at",
            "next_attempt_at", "output_text", "stop_reason", "input_tokens", "output_tokens",
            "cache_creation_input_tokens", "cache_read_input_tokens", "cost_usd", "error_code",
            "error_http_status", "error_message", "error_severity",
        ],
        "ledger_costentry": [
            "id", "job_id", "attempt", "entry_type", "corrects_id", "feature", "model", "user_id",
            "price_id", "outcome", "http_status", "reason_code", "error_type", "error_message",
            "request_id", "input_tokens", "output_tokens", "cache_write_5m_tokens",
            "cache_write_1h_tokens", "cache_read_tokens", "cost_usd", "is_estimated",
            "latency_ms", "retry_delay_seconds", "created_at",
        ],
        "alerts_failurerecord": [
            "job_id", "severity", "reason_code", "retries_exhausted", "http_status", "error_type",
            "message", "request_id", "attempts", "request_snapshot", "state", "created_at",
            "alerted_at", "comment", "requeued_model", "handled_at",
        ],
    }  # fmt: skip
    dropped = {table: droppable_indexes(connection, table) for table in LOADED_TABLES}
    statements = ["SET foreign_key_checks = 0"]
    for table in LOADED_TABLES:
        if dropped[table]:
            drops = ", ".join(f"DROP INDEX `{index}`" for index in dropped[table])
            statements.append(f"ALTER TABLE {table} {drops}")
        statements.append(
            f"LOAD DATA LOCAL INFILE '{files[table]}' INTO TABLE {table} "
            f"({', '.join(columns[table])})"
        )
        if dropped[table]:
            adds = ", ".join(
                f"ADD {'UNIQUE ' if unique else ''}INDEX `{index}` ({', '.join(parts)})"
                for index, (parts, unique) in dropped[table].items()
            )
            statements.append(f"ALTER TABLE {table} {adds}")
        statements.append(f"ANALYZE TABLE {table}")
    mysql(name, "; ".join(statements) + ";", "--local-infile=1")
    for path in files.values():
        os.unlink(path)
    loaded = time.perf_counter() - started

    # Budgets and the windows the ledger writes keep (their spend read once from the ledger).
    for n, feature in enumerate(FEATURES):
        Budget.objects.create(
            scope="feature", feature=feature, period="month", limit_usd=Decimal(300 + 100 * n)
        )
    for user in users[:2]:
        Budget.objects.create(scope="user", user=user, period="day", limit_usd=Decimal("40"))
    for budget in Budget.objects.all():
        start, end = window_bounds(budget.period, now)
        scope = Q(feature=budget.feature) if budget.scope == "feature" else Q(user=budget.user)
        spent = CostEntry.objects.filter(scope, created_at__gte=start, created_at__lt=end)
        BudgetWindow.objects.create(
            budget=budget,
            window_start=start,
            spent_usd=spent.aggregate(total=Sum("cost_usd"))["total"] or Decimal(0),
        )
    ProviderBreaker.objects.create(provider="anthropic")
    print(
        f"loaded: {CostEntry.objects.count():,} ledger rows, {LlmJob.objects.count():,} jobs, "
        f"{counts['failures']:,} DLQ records, {Budget.objects.count()} budgets, {USERS} users, "
        f"{len(FEATURES)} features over {DAYS} days ending now; generated in {generated:.0f} s, "
        f"loaded in {loaded - generated:.0f} s"
    )


def droppable_indexes(connection: Any, table: str) -> dict[str, tuple[list[str], bool]]:
    """A table's secondary indexes no foreign key relies on: name -> (columns, unique), each
    column with its order (a descending one as the migration made it)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT index_name, column_name, non_unique, collation "
            "FROM information_schema.statistics WHERE table_schema = DATABASE() "
            "AND table_name = %s AND index_name <> 'PRIMARY' ORDER BY index_name, seq_in_index",
            [table],
        )
        indexes: dict[str, tuple[list[str], bool]] = {}
        for index, column, non_unique, collation in cursor.fetchall():
            part = f"`{column}`" + (" DESC" if collation == "D" else "")
            indexes.setdefault(index, ([], not non_unique))[0].append(part)
        cursor.execute(
            "SELECT column_name FROM information_schema.key_column_usage WHERE table_schema = "
            "DATABASE() AND table_name = %s AND referenced_table_name IS NOT NULL",
            [table],
        )
        foreign_keys = {column for (column,) in cursor.fetchall()}
    # A foreign key needs some index that starts with its column; keep the first such one.
    needed = set()
    for column in foreign_keys:
        needed.add(
            next(index for index, (parts, _) in indexes.items() if parts[0] == f"`{column}`")
        )
    return {index: spec for index, spec in indexes.items() if index not in needed}


# --- Timing -------------------------------------------------------------------------------------


class QueryLog:
    """Every SQL statement run inside ``with connection.execute_wrapper(log)``. (The test client
    resets ``connection.queries`` at each request, so CaptureQueriesContext sees none.)"""

    def __init__(self) -> None:
        self.statements: list[tuple[str, Any]] = []

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        self.statements.append((sql, params))
        return execute(sql, params, many, context)


def _timed(client: Any, url: str) -> tuple[float, Any]:
    begin = time.perf_counter()
    response = client.get(url)
    elapsed = (time.perf_counter() - begin) * 1000
    assert response.status_code == 200, (url, response.status_code, response.content[:300])
    return elapsed, response


def time_dashboard() -> None:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from jobs.models import LlmJob
    from ledger.models import CostEntry

    staff, _ = get_user_model().objects.get_or_create(
        username="bench-staff", defaults={"is_staff": True}
    )
    client = Client()
    client.force_login(staff)
    now = datetime.now(UTC)
    day, fortnight = now - timedelta(hours=24), now - timedelta(days=14)
    recent_rows = CostEntry.objects.filter(created_at__gte=day).count()
    recent_jobs = LlmJob.objects.filter(completed_at__gte=day).count()
    cost_rows = CostEntry.objects.filter(created_at__gte=fortnight).count()
    print(f"in the last 24 h: {recent_rows:,} ledger rows, {recent_jobs:,} finished jobs; "
          f"in the last 14 days: {cost_rows:,} ledger rows")  # fmt: skip
    print(f"median and slowest of {RUNS} runs after a warm-up, through Django's test client "
          "(signed-in staff, the whole view)")  # fmt: skip
    print(f"{'request':<44} {'median ms':>10} {'max ms':>8} {'queries':>8} {'bytes':>9}")
    urls = ["/admin/ops/dashboard/"] + [
        f"/admin/ops/dashboard/data.json?hours={hours}" for hours in (1, 6, 24)
    ]
    slowest_total = 0.0
    for url in urls:
        _timed(client, url)
        timings = []
        queries = QueryLog()
        with connection.execute_wrapper(queries):
            _, response = _timed(client, url)
        for _ in range(RUNS):
            elapsed, _ = _timed(client, url)
            timings.append(elapsed)
        median = statistics.median(timings)
        slowest_total += median if url.endswith(("/", "=24")) else 0
        print(
            f"{url:<44} {median:>10.0f} {max(timings):>8.0f} "
            f"{len(queries.statements):>8} {len(response.content):>9,}"
        )
    print(f"page + data.json (24 h), medians added: {slowest_total:.0f} ms")

    print("\nthe queries of data.json?hours=24, each timed once more, with EXPLAIN's indexes:")
    queries = QueryLog()
    with connection.execute_wrapper(queries):
        client.get("/admin/ops/dashboard/data.json?hours=24")
    with connection.cursor() as cursor:
        for sql, params in queries.statements:
            if not sql.lstrip().upper().startswith("SELECT"):
                continue
            begin = time.perf_counter()
            cursor.execute(sql, params)
            cursor.fetchall()
            elapsed = (time.perf_counter() - begin) * 1000
            cursor.execute("EXPLAIN " + sql, params)
            names = [col[0] for col in cursor.description]
            plan = [dict(zip(names, line, strict=True)) for line in cursor.fetchall()]
            chosen = "+".join(
                f"{SHORT.get(str(p['table']), p['table'])}:{p['key']}" for p in plan if p["table"]
            )
            print(f"{elapsed:>8.1f} ms  {chosen:<60} {sql[:90]}")
    print(f"\nreproduce: BENCH_DASHBOARD_ROWS={ROWS} BENCH_DASHBOARD_DAYS={DAYS} "
          f"BENCH_RUNS={RUNS} make bench-dashboard")  # fmt: skip


if __name__ == "__main__":
    main()
