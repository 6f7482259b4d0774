# Two commands do the whole set-up: `make run` starts the system, `make test` runs the tests.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
TEST_DATABASE_URL ?= mysql://root@127.0.0.1:3306/test
TEST_REDIS_URL ?= redis://127.0.0.1:6379/15
# make test-postgres runs the suite on PostgreSQL instead (docs/databases.md); pytest-django
# creates test_test_gw<N> there as on MariaDB.
TEST_POSTGRES_URL ?= postgres://postgres@127.0.0.1:5432/test
# What CI runs on PostgreSQL after the whole suite on MariaDB (make test-postgres-core): the money
# (ledger, budgets, counters), the job's path and its takeovers, and the concurrency tests.
POSTGRES_CORE_TESTS := tests/ledger tests/metrics tests/keys/test_key_budgets.py \
	tests/jobs/test_job_path.py tests/jobs/test_takeover.py tests/jobs/test_concurrency_keys.py \
	tests/jobs/test_stray_copies.py tests/jobs/test_lease.py tests/ratelimits tests/batches
# pytest-xdist workers for make test (each its own test database and Redis index, tests/parallel.py).
TEST_WORKERS ?= 5

.PHONY: run token test test-long test-postgres test-postgres-core test-django60 test-django60-core venv-django60 lint typecheck venv dev-venv migrate services system browser tools bench bench-costs bench-metrics bench-dashboard bench-concurrency bench-ratelimit bench-submit bench-pipeline bench-agents bench-batch bench-streaming bench-embeddings bench-deferred bench-gateway bench-tracing chaos chaos-mix cluster-drill clean

$(VENV)/.installed: requirements.txt
	./scripts/system-deps.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	touch $@

$(VENV)/.dev-installed: $(VENV)/.installed requirements-dev.txt
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $@

venv: $(VENV)/.installed
dev-venv: $(VENV)/.dev-installed

migrate: venv
	$(BIN)/python manage.py migrate --noinput

# DEBUG is off unless asked for; a local run asks for it (DJANGO_DEBUG=False make run does not).
# The banner (ops/ready_banner.py) waits for every process, then prints the URLs, the demo login
# and the API key below the start-up logs; logs are human-readable here (JSON elsewhere).
# Ctrl-C stops honcho, not make (runtime/foreground.py): a clean stop ends with exit code 0.
run: venv migrate
	$(BIN)/python manage.py ensure_demo_user
	$(BIN)/python manage.py ready_banner & \
	DJANGO_DEBUG=$${DJANGO_DEBUG:-True} LOG_FORMAT=$${LOG_FORMAT:-plain} \
		PATH="$(CURDIR)/$(BIN):$$PATH" exec $(BIN)/python -m runtime.foreground -- $(BIN)/honcho start

# The demo user's API key (every scope), alone (TOKEN=$$(make -s token)).
token: venv
	@$(BIN)/python manage.py demo_token

services:
	./scripts/services.sh

# The system packages (scripts/system-deps.sh): the venv's build installs them once; make test
# checks them again on every run (haproxy for the load-balancer test came after many venvs).
system:
	./scripts/system-deps.sh

browser:
	./scripts/browser-deps.sh

# promtool (Debian's prometheus package) for the metrics, rules and config checks.
tools:
	./scripts/prometheus-deps.sh

lint: dev-venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: dev-venv
	$(BIN)/mypy llmops api runtime loops providers jobs ledger alerts dlq metrics fake_provider ops ratelimits batches pipelines agents chaos keys embeddings features deferred audit webhooks gateway tracing mcp_tools

test: dev-venv system services browser tools lint typecheck
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} REDIS_URL=$${TEST_REDIS_URL:-$(TEST_REDIS_URL)} \
		$(BIN)/python -m pytest tests -q -n $(TEST_WORKERS) --maxschedchunk 1 -m "not long" \
		$(PYTEST_ARGS)

# The tests marked long (pyproject.toml): the API schema fuzzed as a user and as staff, every
# runnable block of the README and docs against a real stack, 2,000 deferred jobs, 1,000 batch
# items, the reduced mixed drill, the supervisord example. About four minutes of CPU that make
# test leaves out to stay under a quarter of an hour; CI runs both.
test-long: dev-venv system services browser tools
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} REDIS_URL=$${TEST_REDIS_URL:-$(TEST_REDIS_URL)} \
		$(BIN)/python -m pytest tests -q -n $(TEST_WORKERS) --maxschedchunk 1 -m long $(PYTEST_ARGS)

# Django 6.0 beside the 5.2 LTS of requirements.txt (docs/databases.md#django-versions): a venv of
# its own on Python 3.12 (Django 6 needs it), requirements.txt and requirements-dev.txt with
# Django==6.0.* instead. make test-django60 runs the whole suite there, test-django60-core CI's
# subset (the PostgreSQL core's tests, on MariaDB). 6.1 once django-prometheus allows it.
DJANGO60_VERSION := 6.0.10
PYTHON312 ?= $(firstword $(wildcard /usr/bin/python3.12 $(HOME)/.pyenv/versions/3.12*/bin/python3.12) python3.12)
VENV60 := .venv-django60
$(VENV60)/.installed: requirements.txt requirements-dev.txt
	./scripts/system-deps.sh
	test -x $(VENV60)/bin/python || $(PYTHON312) -m venv $(VENV60)
	$(VENV60)/bin/pip install -q --upgrade pip
	sed 's/^Django==.*/Django==$(DJANGO60_VERSION)/' requirements.txt > $(VENV60)/requirements.txt
	grep -v '^-r ' requirements-dev.txt > $(VENV60)/requirements-dev.txt
	$(VENV60)/bin/pip install -q -r $(VENV60)/requirements.txt -r $(VENV60)/requirements-dev.txt
	touch $@

venv-django60: $(VENV60)/.installed

test-django60: venv-django60 system services browser tools
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} REDIS_URL=$${TEST_REDIS_URL:-$(TEST_REDIS_URL)} \
		$(VENV60)/bin/python -m pytest tests -q -n $(TEST_WORKERS) --maxschedchunk 1 $(PYTEST_ARGS)

test-django60-core: venv-django60 system services tools
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} REDIS_URL=$${TEST_REDIS_URL:-$(TEST_REDIS_URL)} \
		$(VENV60)/bin/python -m pytest $(POSTGRES_CORE_TESTS) -q -n $(TEST_WORKERS) \
		--maxschedchunk 1 $(PYTEST_ARGS)

# The whole suite on PostgreSQL (about as long as make test); the same Redis indexes as make test,
# so run the two one after the other.
test-postgres: dev-venv system services browser tools lint typecheck
	DATABASE_URL=$(TEST_POSTGRES_URL) REDIS_URL=$${TEST_REDIS_URL:-$(TEST_REDIS_URL)} \
		$(BIN)/python -m pytest tests -q -n $(TEST_WORKERS) --maxschedchunk 1 $(PYTEST_ARGS)

# The money, job-path and concurrency tests on PostgreSQL (POSTGRES_CORE_TESTS above): CI's.
test-postgres-core: dev-venv system services tools
	DATABASE_URL=$(TEST_POSTGRES_URL) REDIS_URL=$${TEST_REDIS_URL:-$(TEST_REDIS_URL)} \
		$(BIN)/python -m pytest $(POSTGRES_CORE_TESTS) -q -n $(TEST_WORKERS) --maxschedchunk 1 \
		$(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(VENV60) db.sqlite3 staticfiles

# The chaos drill (chaos/, docs/operations.md#chaos-drill): the production checklist's faults
# against the fake provider and real workers, about ten minutes, on its own database (created
# and migrated if missing) and Redis index, which it FLUSHDBs. CHAOS_ARGS="--jobs 500" passes
# options on; the report ends the output, and the exit code says whether every check passed.
# On PostgreSQL: CHAOS_DATABASE_URL=postgres://postgres@127.0.0.1:5432/llmops_chaos make chaos.
CHAOS_DATABASE_URL ?= mysql://root@127.0.0.1:3306/llmops_chaos
CHAOS_REDIS_URL ?= redis://127.0.0.1:6379/5
chaos: venv services
	$(BIN)/python scripts/create_database.py $(CHAOS_DATABASE_URL)
	DATABASE_URL=$(CHAOS_DATABASE_URL) REDIS_URL=$(CHAOS_REDIS_URL) $(BIN)/python manage.py migrate --noinput -v0
	DATABASE_URL=$(CHAOS_DATABASE_URL) REDIS_URL=$(CHAOS_REDIS_URL) $(BIN)/python manage.py llm_chaos $(CHAOS_ARGS)

# The mixed drill (docs/operations.md#the-mixed-drill): every kind of work at once with seeded
# faults, checked against the fake provider's bill; about five minutes, on the same database and
# Redis index as make chaos. CHAOS_ARGS="--seed 123" replays a run's plan.
chaos-mix: venv services
	$(BIN)/python scripts/create_database.py $(CHAOS_DATABASE_URL)
	DATABASE_URL=$(CHAOS_DATABASE_URL) REDIS_URL=$(CHAOS_REDIS_URL) $(BIN)/python manage.py migrate --noinput -v0
	DATABASE_URL=$(CHAOS_DATABASE_URL) REDIS_URL=$(CHAOS_REDIS_URL) $(BIN)/python manage.py llm_chaos --mix $(CHAOS_ARGS)

# The cluster drill (docs/deploy.md#the-cluster-drill): the hosts built on this machine with
# network namespaces (as root), a worker host's database, Redis and every path frozen 70 s and
# healed, then a worker host killed, with long calls in flight; checked against the fake
# provider's own logs; last, the rate limiter at the provider's limit with workers on three
# hosts. About fifteen minutes, on its own database (created and migrated if missing) and its
# own Redis servers. CLUSTER_ARGS="--paths everything --no-kill" passes options on.
CLUSTER_DATABASE_URL ?= mysql://root@127.0.0.1:3306/llmops_cluster
# The sentinels the drill starts on its redis1-3 hosts (chaos/cluster/redis_hosts.py REDIS_URL).
CLUSTER_REDIS_URL := redis+sentinel://10.77.0.11:26379,10.77.0.12:26379,10.77.0.13:26379/llmcd/0
cluster-drill: venv services
	mysql -h127.0.0.1 -uroot -e "CREATE DATABASE IF NOT EXISTS \`$(lastword $(subst /, ,$(CLUSTER_DATABASE_URL)))\` CHARACTER SET utf8mb4"
	DATABASE_URL=$(CLUSTER_DATABASE_URL) REDIS_URL=$(CHAOS_REDIS_URL) $(BIN)/python manage.py migrate --noinput -v0
	DATABASE_URL=$(CLUSTER_DATABASE_URL) REDIS_URL=$(CLUSTER_REDIS_URL) $(BIN)/python manage.py llm_cluster_drill $(CLUSTER_ARGS)

bench: dev-venv services
	$(BIN)/python bench/throughput.py
	$(BIN)/python bench/fake_provider.py
	$(BIN)/python bench/costs.py
	$(BIN)/python bench/concurrency.py
	$(BIN)/python bench/ratelimit.py
	$(BIN)/python bench/submit.py
	$(BIN)/python bench/pipeline.py
	$(BIN)/python bench/batch_submit.py

# Cost reports over a million synthetic ledger rows (its own database): query times and indexes.
bench-costs: dev-venv services
	$(BIN)/python bench/costs.py

# A scrape of /metrics after 100,000 jobs (2,000 through real forking workers), next to
# prometheus_client's multiprocess mode (its own database).
bench-metrics: dev-venv services
	$(BIN)/python bench/metrics_scrape.py

# The ops dashboard (page + data.json) over a million ledger rows and their jobs (its own database).
bench-dashboard: dev-venv services
	$(BIN)/python bench/dashboard.py

# Provider calls in flight per GB of worker memory at 5 s latency: threaded llm workers next to
# 20 forking ones (its own database); target 200 in flight within 2 GB RSS.
bench-concurrency: dev-venv services
	$(BIN)/python bench/concurrency.py

# The shared rate limiter at the provider's limit: the fake provider with --rpm R and 1-3 s of
# latency, W = 2, 4 and 8 worker processes, a backlog (its own database): calls per minute as a
# fraction of R, and the share of 429s. Target: at least 0.95 of R with under 1 % 429s.
bench-ratelimit: dev-venv services
	$(BIN)/python bench/ratelimit.py

# POST /api/v1/jobs/ under 32 concurrent clients next to GET /api/v1/me/ on the Procfile's web
# line, with real llm workers and the fake provider at 0 s and at 10 s (its own database):
# throughput, p50/p99 and the ratio. Target: at least 0.5.
bench-submit: dev-venv services
	$(BIN)/python bench/submit.py

# LLM jobs per second through the llm workers with an instant fake provider next to a no-op RQ
# job on the same worker class, and one job's SQL queries and Redis round trips (its own
# database). Target: at least 0.5.
bench-pipeline: dev-venv services
	$(BIN)/python bench/pipeline.py

# The job path with traces off, on to a collector that answers, and on to one that hangs (its own
# database): claim to complete per job and jobs/s, and what became of the spans (docs/tracing.md).
bench-tracing: dev-venv services
	$(BIN)/python bench/tracing.py

# 100 concurrent agent runs of 10 turns through the Procfile's workers: steps/s, overhead per step.
bench-agents: dev-venv services
	$(BIN)/python bench/agents.py

# The time to accept a 10,000-item batch (POST /api/v1/batches/ until its 202) on the Procfile's
# web line, distinct items and every item twice, and a GET of the batch (its own database).
bench-batch: dev-venv services
	$(BIN)/python bench/batch_submit.py

# Embedding inputs per second through a 10,000-item embedding batch (submit, run on the
# Procfile's llm workers against the fake provider's Embeddings API, read every vector back).
bench-embeddings: dev-venv services
	$(BIN)/python bench/embeddings.py

# The cost and completion time of 10,000 deferred summaries (the deferred process, provider
# message batches at the batch price, the provider's processing simulated by the fake) against
# the same 10,000 in real time on the Procfile's llm workers (its own database).
bench-deferred: dev-venv services
	$(BIN)/python bench/deferred.py

# Streaming's cost: the streamed provider call next to the old non-streaming one (CPU per call,
# calls/s, 256 and 4,000 output tokens), then 200 jobs streaming at once through the Procfile's
# web and llm worker lines, one WebSocket each: deltas per job per second, every job's deltas
# checked against its output, the workers' and web's CPU and the workers' peak RSS (its own
# database).
bench-streaming: dev-venv services
	$(BIN)/python bench/streaming.py

# The race with LiteLLM (issue 40): llmops's Anthropic and OpenAI doors and LiteLLM's proxy (its
# own virtualenv, installed on first use; no database) against the same fake provider, streaming
# and not: added latency at one client, calls/s at 64 clients with a 1 s provider, memory (its
# own database and Redis index 6).
bench-gateway: dev-venv services
	$(BIN)/python bench/gateway.py
