"""Cost reports over a million ledger rows: how long each report takes, and which index it uses.

    make bench-costs                  # 1,000,000 CostEntry rows, 20,000 jobs, 60 days
    BENCH_COST_ROWS=200000 make bench-costs
    BENCH_COSTS_REUSE=1 make bench-costs   # time again on the last run's ledger, no reload
    BENCH_COSTS_ADD_INDEXES=1 make bench-costs   # with the proposed covering indexes added

Uses its own MariaDB database (BENCH_COSTS_DATABASE_URL, default
mysql://root@127.0.0.1:3306/llmops_bench_costs, recreated), loads the synthetic ledger with
LOAD DATA LOCAL INFILE (the mysql client; a few ORM bulk inserts for users, jobs and failures),
then times ``cost_report`` (the selector behind the API, the command and the admin: every query
it makes) for each report, and prints the median and EXPLAIN's chosen index per query.
"""

import csv
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

ROWS = int(os.environ.get("BENCH_COST_ROWS", "1000000"))
ROWS_PER_JOB = 50
"""Many rows per job keeps the job table small beside the ledger; distinct-job counts then have
to fold 50 rows into one, the harder case for COUNT(DISTINCT)."""
USERS = 8
FEATURES = ["summarize", "classify", "extract", "translate", "chat", "moderate"]
MODELS = ["claude-haiku-4-5", "claude-sonnet-4-6", "claude-opus-4-1"]
DAYS = 60
RUNS = int(os.environ.get("BENCH_RUNS", "5"))
REUSE = os.environ.get("BENCH_COSTS_REUSE") == "1"
"""Time the reports on the database the last run loaded, without loading it again."""
ADD_INDEXES = os.environ.get("BENCH_COSTS_ADD_INDEXES") == "1"
"""Add PROPOSED_INDEXES (those missing) before timing: the reports with the covering indexes."""
_COVERED = (
    "job_id, entry_type, input_tokens, output_tokens, cache_write_5m_tokens, "
    "cache_write_1h_tokens, cache_read_tokens, cost_usd"
)
SHORT = {
    "ledger_costentry": "ledger",
    "alerts_failurerecord": "failures",
    "jobs_llmjob": "jobs",
    "auth_user": "users",
}
PROPOSED_INDEXES = {
    # Each scope's (scope, created_at) index extended with every column a report reads, so the
    # report never leaves the index: no lookup of the row by its random uuid.
    "cost_report_created": f"created_at, feature, model, user_id, {_COVERED}",
    "cost_report_feature": f"feature, created_at, model, user_id, {_COVERED}",
    "cost_report_user": f"user_id, created_at, feature, model, {_COVERED}",
    "cost_report_model": f"model, created_at, feature, user_id, {_COVERED}",
}
DATABASE_URL = os.environ.get(
    "BENCH_COSTS_DATABASE_URL", "mysql://root@127.0.0.1:3306/llmops_bench_costs"
)
# Loaded rows are ordered by primary key (InnoDB clusters on it); the ledger's uuid4 keys are
# random, so this is only load speed, not a friendlier layout for the reports.
COLUMNS = [
    "id", "job_id", "attempt", "entry_type", "corrects_id", "feature", "model", "user_id",
    "outcome", "reason_code", "error_type", "error_message", "request_id", "input_tokens",
    "output_tokens", "cache_write_5m_tokens", "cache_write_1h_tokens", "cache_read_tokens",
    "cost_usd", "is_estimated", "created_at",
]  # fmt: skip


def mysql(name: str, sql: str, *extra: str) -> str:
    host = DATABASE_URL.split("@", 1)[1].split("/", 1)[0]
    hostname, _, port = host.partition(":")
    args = ["mysql", f"-h{hostname}", f"-P{port or 3306}", "-uroot", *extra]
    return subprocess.run(
        [*args, name, "-e", sql], check=True, capture_output=True, text=True
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
        py = sys.executable
        subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)

    import django

    django.setup()
    from django.db import connection
    from django.db.models import Max

    from ledger.models import CostEntry

    if REUSE:
        latest = CostEntry.objects.aggregate(latest=Max("created_at"))["latest"]
        now = latest.replace(microsecond=0) + timedelta(seconds=1)
        print(f"ledger: {CostEntry.objects.count():,} rows (reused)")
    else:
        now = datetime.now(UTC).replace(microsecond=0)
        load(name, now)
    if ADD_INDEXES:
        with connection.cursor() as cursor:
            cursor.execute("SHOW INDEX FROM ledger_costentry")
            present = {line[2] for line in cursor.fetchall()}
            for index, columns in PROPOSED_INDEXES.items():
                if index not in present:
                    cursor.execute(f"ALTER TABLE ledger_costentry ADD INDEX {index} ({columns})")
                    print(f"added index {index} ({columns})")
    time_reports(now)


def load(name: str, now: datetime) -> None:
    """Users, jobs and failures through the ORM; the ledger rows through LOAD DATA."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from dlq.models import FailureRecord
    from jobs.models import LlmJob
    from ledger.models import CostEntry

    rng = random.Random(7)
    started = time.perf_counter()
    User = get_user_model()
    users = User.objects.bulk_create([User(username=f"user{i}") for i in range(USERS)])
    jobs_total = max(1, ROWS // ROWS_PER_JOB)
    jobs = [
        LlmJob(
            user=rng.choice(users),
            feature=rng.choice(FEATURES),
            model=rng.choice(MODELS),
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=256,
            request_fingerprint="bench",
            status="completed",
        )
        for _ in range(jobs_total)
    ]
    LlmJob.objects.bulk_create(jobs, batch_size=2000)
    starts = {job.id: now - timedelta(seconds=rng.uniform(0, DAYS * 86400)) for job in jobs}
    failed = rng.sample(jobs, k=max(1, jobs_total // 50))
    FailureRecord.objects.bulk_create(
        [
            FailureRecord(
                job=job, severity="ERROR", reason_code="server_error", attempts=3,
                request_snapshot={},
            )
            for job in failed
        ],
        batch_size=2000,
    )  # fmt: skip

    def prep(value: uuid.UUID) -> str:
        return str(CostEntry._meta.pk.get_db_prep_value(value, connection))  # type: ignore[union-attr]

    rows = []
    for job in jobs:
        moment = starts[job.id]
        estimated: dict[int, str] = {}
        for number in range(1, ROWS_PER_JOB + 1):
            moment += timedelta(seconds=rng.uniform(1, 120))
            row_id = prep(uuid.uuid4())
            correction = number > ROWS_PER_JOB - 2
            attempt = number - (ROWS_PER_JOB - 2) if correction else number
            outcome = "success" if rng.random() < 0.92 else "error_response"
            if attempt <= 2 and not correction:
                outcome = "unknown_outcome"
            input_tokens = rng.randint(50, 4000) if outcome == "success" or correction else 0
            output_tokens = rng.randint(10, 800) if input_tokens else 0
            cost = Decimal(input_tokens) * Decimal("0.000003") + Decimal(output_tokens) * Decimal(
                "0.000015"
            )
            if outcome == "unknown_outcome":
                cost = Decimal("0.012000")
                estimated[attempt] = row_id
            if correction:
                cost -= Decimal("0.012000")
            rows.append(
                [
                    row_id, prep(job.id), attempt, "correction" if correction else "attempt",
                    estimated[attempt] if correction else None, job.feature, job.model,
                    job.user_id, "success" if correction else outcome, "", "", "", "",
                    input_tokens, output_tokens, rng.choice([0, 0, 0, 120]), 0,
                    rng.choice([0, 0, 900]), f"{cost:.6f}", int(outcome == "unknown_outcome"),
                    moment.strftime("%Y-%m-%d %H:%M:%S.%f"),
                ]
            )  # fmt: skip
            if len(rows) >= ROWS:
                break
        if len(rows) >= ROWS:
            break
    rows.sort(key=lambda row: str(row[0]))
    with tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False, newline="") as file:
        writer = csv.writer(file, delimiter="\t", lineterminator="\n", quoting=csv.QUOTE_NONE)
        writer.writerows([r"\N" if cell is None else cell for cell in row] for row in rows)
    del rows
    prepared = time.perf_counter() - started
    # Secondary indexes are built far faster by one sort after the load than row by row during
    # it (the random uuid keys make every insert land on a different page): drop those no foreign
    # key needs, load, and add them back exactly as the migrations made them.
    dropped = droppable_indexes(connection)
    drops = ", ".join(f"DROP INDEX `{index}`" for index in dropped)
    adds = ", ".join(
        f"ADD {'UNIQUE ' if unique else ''}INDEX `{index}` ({', '.join(columns)})"
        for index, (columns, unique) in dropped.items()
    )
    mysql(
        name,
        f"ALTER TABLE ledger_costentry {drops}; "
        "SET foreign_key_checks = 0; "  # corrections point at rows loaded later; all exist
        f"LOAD DATA LOCAL INFILE '{file.name}' INTO TABLE ledger_costentry ({', '.join(COLUMNS)}); "
        f"ALTER TABLE ledger_costentry {adds}; ANALYZE TABLE ledger_costentry;",
        "--local-infile=1",
    )
    os.unlink(file.name)
    loaded = time.perf_counter() - started
    count = CostEntry.objects.count()
    print(f"ledger: {count:,} rows, {jobs_total:,} jobs, {len(failed):,} failures, {USERS} users, "
          f"{len(FEATURES)} features, {len(MODELS)} models over {DAYS} days; "
          f"generated in {prepared:.0f} s, loaded in {loaded - prepared:.0f} s")  # fmt: skip


def droppable_indexes(connection: Any) -> dict[str, tuple[list[str], bool]]:
    """The ledger's secondary indexes no foreign key relies on: name -> (columns, unique)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT index_name, column_name, non_unique FROM information_schema.statistics "
            "WHERE table_schema = DATABASE() AND table_name = 'ledger_costentry' "
            "AND index_name <> 'PRIMARY' ORDER BY index_name, seq_in_index"
        )
        indexes: dict[str, tuple[list[str], bool]] = {}
        for index, column, non_unique in cursor.fetchall():
            indexes.setdefault(index, ([], not non_unique))[0].append(column)
        cursor.execute(
            "SELECT column_name FROM information_schema.key_column_usage WHERE table_schema = "
            "DATABASE() AND table_name = 'ledger_costentry' AND referenced_table_name IS NOT NULL"
        )
        foreign_keys = {column for (column,) in cursor.fetchall()}
    # A foreign key needs some index that starts with its column; keep the first such one.
    needed = set()
    for column in foreign_keys:
        needed.add(next(index for index, (cols, _) in indexes.items() if cols[0] == column))
    return {index: spec for index, spec in indexes.items() if index not in needed}


def time_reports(now: datetime) -> None:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from ledger.models import CostEntry
    from ledger.selectors import cost_report

    user = get_user_model().objects.order_by("id").first()
    reports = [
        (group_by, days, scope)
        for days in (7, 30)
        for scope in (None, "feature", "user")
        for group_by in ("feature", "model", "user", "day")
    ]
    print(f"median of {RUNS} runs after a warm-up, all queries of a report: ledger GROUP BY, "
          "failures GROUP BY, distinct jobs (by model, day) or usernames (by user)")  # fmt: skip
    print(
        f"{'report':<40} {'rows in range':>13} {'median ms':>10} {'max ms':>8}  indexes (EXPLAIN)"
    )
    slowest = 0.0
    for group_by, days, scope in reports:
        since, until = now - timedelta(days=days), now
        arguments = {"group_by": group_by, "since": since, "until": until}
        if scope == "feature":
            arguments["feature"] = FEATURES[0]
        if scope == "user":
            arguments["user"] = user
        with CaptureQueriesContext(connection) as queries:
            cost_report(**arguments)  # type: ignore[arg-type]
        timings = []
        for _ in range(RUNS):
            begin = time.perf_counter()
            cost_report(**arguments)  # type: ignore[arg-type]
            timings.append((time.perf_counter() - begin) * 1000)
        chosen = []
        with connection.cursor() as cursor:
            for query in queries.captured_queries:
                cursor.execute("EXPLAIN " + query["sql"])
                names = [col[0] for col in cursor.description]
                plan = [dict(zip(names, line, strict=True)) for line in cursor.fetchall()]
                chosen.append("+".join(f"{SHORT[p['table']]}:{p['key']}" for p in plan))
        in_range = CostEntry.objects.filter(created_at__gte=since, created_at__lt=until)
        label = f"by {group_by}, {days}d"
        if scope == "feature":
            in_range = in_range.filter(feature=FEATURES[0])
            label += f", feature={FEATURES[0]}"
        if scope == "user":
            in_range = in_range.filter(user=user)
            label += f", user={user.get_username()}"  # type: ignore[union-attr]
        median = statistics.median(timings)
        slowest = max(slowest, median)
        print(f"{label:<40} {in_range.count():>13,} {median:>10.0f} {max(timings):>8.0f}  "
              f"{' | '.join(chosen)}")  # fmt: skip
    print(f"slowest median: {slowest:.0f} ms")


if __name__ == "__main__":
    main()
