"""deploy/prometheus and deploy/grafana: the alert rules, their unit tests and the example
config pass promtool; the Grafana dashboard imports anywhere and asks only for metrics that
/metrics exposes.

promtool comes from Debian's prometheus package (scripts/prometheus-deps.sh, `make tools`); the
tests fail without it rather than skip."""

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.test import Client

ROOT = Path(__file__).resolve().parent.parent.parent
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS_DIR / "rules.yml"
RULES_TEST = PROMETHEUS_DIR / "rules_test.yml"
CONFIG = PROMETHEUS_DIR / "prometheus.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "llmops-dashboard.json"

LLM_METRICS = frozenset(
    {
        "llm_jobs_total",
        "llm_attempts_total",
        "llm_tokens_total",
        "llm_cost_usd_total",
        "llm_queue_depth",
        "llm_queue_oldest_job_age_seconds",
        "llm_failures_total",
        "llm_budget_used_ratio",
        "llm_retries_scheduled",
        "llm_breaker_open",
        "llm_workers",
    }
)
"""The LLM metrics of /metrics (issue 9), by their exposed names; histograms below."""

DJANGO_METRICS = frozenset(
    {
        "django_http_requests_before_middlewares_total",
        "django_http_responses_before_middlewares_total",
        "django_http_requests_unknown_latency_including_middlewares_total",
        "django_http_requests_unknown_latency_total",
        "django_http_ajax_requests_total",
        "django_http_requests_total_by_method_total",
        "django_http_requests_total_by_transport_total",
        "django_http_requests_total_by_view_transport_method_total",
        "django_http_responses_total_by_templatename_total",
        "django_http_responses_total_by_status_total",
        "django_http_responses_total_by_status_view_method_total",
        "django_http_responses_total_by_charset_total",
        "django_http_responses_streaming_total",
        "django_http_exceptions_total_by_type_total",
        "django_http_exceptions_total_by_view_total",
        "django_db_new_connections_total",
        "django_db_new_connection_errors_total",
        "django_db_execute_total",
        "django_db_execute_many_total",
        "django_db_errors_total",
    }
)
"""django-prometheus 2.5's HTTP and database metrics as exposed (a Counter gets ``_total``)."""

HISTOGRAMS = frozenset(
    {
        "llm_provider_latency_seconds",
        "django_http_requests_latency_including_middlewares_seconds",
        "django_http_requests_latency_seconds_by_view_method",
        "django_http_requests_body_total_bytes",
        "django_http_responses_body_total_bytes",
        "django_db_query_duration_seconds",
    }
)
"""Histograms: queried as ``<name>_bucket``, ``<name>_sum`` and ``<name>_count``."""

ALLOWED_METRICS = (
    LLM_METRICS
    | DJANGO_METRICS
    | {histogram + suffix for histogram in HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")}
)

LLM_COUNTER_RANGE = re.compile(r"\b(?:rate|increase)\(\s*llm_")
ONCE_PER_SYSTEM = re.compile(r"max without \(instance\) \(\s*(?:rate|increase)\(\s*llm_")
HISTOGRAM_SERIES = re.compile(
    "(?:" + "|".join(f"(?<={name})" for name in sorted(HISTOGRAMS)) + ")_(?:bucket|sum|count)$"
)
"""The series suffix of a histogram's name (``..._seconds_bucket`` -> ``..._seconds``)."""
METRIC_NAME = re.compile(r"(?<![\w:])(?:llm|django)_\w+")
STRING_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')

GRAFANA_VARIABLES = {
    "$__rate_interval": "5m",
    "$__interval": "1d",
    "$__range": "6h",
    "$feature": ".*",
    "$model": ".*",
}
"""What Grafana puts in place of its variables, to check an expression with promtool."""


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool not found: run scripts/prometheus-deps.sh (or `make tools`) to install "
            "Debian's prometheus package"
        )
    return path


def run(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(arg) for arg in args], cwd=cwd, capture_output=True, text=True, timeout=60
    )


def metric_names(expr: str) -> set[str]:
    """The llm_* and django_* names an expression reads (label values in quotes left out)."""
    return set(METRIC_NAME.findall(STRING_LITERAL.sub('""', expr)))


def walk(node: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) of a JSON document, depth first."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from walk(item)


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


@pytest.fixture(scope="module")
def rule_groups() -> list[dict[str, Any]]:
    return yaml.safe_load(RULES.read_text())["groups"]


def dashboard_exprs(dashboard: dict[str, Any]) -> list[str]:
    return [value for key, value in walk(dashboard) if key == "expr"]


# --- Prometheus ------------------------------------------------------------------------------


def test_it_passes_promtool_check_rules(promtool: str) -> None:
    result = run(promtool, "check", "rules", RULES)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_alert_unit_tests_pass(promtool: str) -> None:
    result = run(promtool, "test", "rules", RULES_TEST)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_unit_tests_fail_when_a_threshold_moves(promtool: str, tmp_path: Path) -> None:
    """The unit tests can fail: the budget warning at 96 % instead of 80 % breaks them."""
    shutil.copy(RULES_TEST, tmp_path)
    rules = RULES.read_text()
    assert rules.count("(llm_budget_used_ratio) >= 0.8 < 1") == 1
    (tmp_path / "rules.yml").write_text(rules.replace(">= 0.8 < 1", ">= 0.96 < 1"))
    result = run(promtool, "test", "rules", tmp_path / "rules_test.yml")
    assert result.returncode != 0
    assert "LlmBudgetNearlyExhausted" in result.stdout + result.stderr


def test_every_alert_has_a_severity_and_annotations(rule_groups: list[dict[str, Any]]) -> None:
    alerts = [rule for group in rule_groups for rule in group["rules"] if "alert" in rule]
    assert any(group["name"] == "llmops" for group in rule_groups)
    assert {
        "LlmBudgetNearlyExhausted",
        "LlmBudgetExhausted",
        "LlmJobFailureRateHigh",
        "LlmAttemptErrorRateHigh",
        "LlmQueueWaitHigh",
        "LlmCriticalFailure",
        "LlmProviderBreakerOpen",
        "LlmNoWorker",
    } <= {alert["alert"] for alert in alerts}
    for alert in alerts:
        # The application's severities (alerts.models.Severity), in lowercase.
        assert alert["labels"]["severity"] in ("warning", "error", "critical"), alert["alert"]
        assert alert["annotations"]["summary"].strip(), alert["alert"]
        assert alert["annotations"]["description"].strip(), alert["alert"]


def test_every_alert_is_tested_firing_and_the_main_ones_not_firing(
    rule_groups: list[dict[str, Any]],
) -> None:
    alerts = {rule["alert"] for group in rule_groups for rule in group["rules"] if "alert" in rule}
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in yaml.safe_load(RULES_TEST.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert alerts <= firing, f"never tested firing: {alerts - firing}"
    required = {"LlmBudgetNearlyExhausted", "LlmBudgetExhausted", "LlmCriticalFailure"}
    assert required | {"LlmQueueWaitHigh"} <= quiet


def test_the_rules_read_only_exposed_metrics(rule_groups: list[dict[str, Any]]) -> None:
    for group in rule_groups:
        for rule in group["rules"]:
            unknown = metric_names(rule["expr"]) - ALLOWED_METRICS
            assert not unknown, f"{rule.get('alert') or rule.get('record')}: {unknown}"


def test_rules_count_system_wide_counters_once(rule_groups: list[dict[str, Any]]) -> None:
    """Every web host reports the same llm_* counters: a rate is taken once, not once per host."""
    for group in rule_groups:
        for rule in group["rules"]:
            assert_counted_once(rule["expr"])


def assert_counted_once(expr: str) -> None:
    ranges = LLM_COUNTER_RANGE.findall(expr)
    once = ONCE_PER_SYSTEM.findall(expr)
    assert len(ranges) == len(once), f"llm_* rate or increase not once per system: {expr}"


def test_the_example_config_passes_promtool_check_config(promtool: str, tmp_path: Path) -> None:
    """With a token file beside it, as an operator installs it (the repository holds no token)."""
    shutil.copy(CONFIG, tmp_path / "prometheus.yml")
    shutil.copy(RULES, tmp_path / "rules.yml")
    result = run(promtool, "check", "config", "prometheus.yml", cwd=tmp_path)
    assert result.returncode != 0
    assert "llmops_metrics_token" in result.stdout + result.stderr

    (tmp_path / "llmops_metrics_token").write_text("a-metrics-token\n")
    result = run(promtool, "check", "config", "prometheus.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout


def test_the_example_config_scrapes_metrics_with_the_bearer_token() -> None:
    config = yaml.safe_load(CONFIG.read_text())
    assert config["rule_files"] == ["rules.yml"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["llmops"]["metrics_path"] == "/metrics"
    for job in jobs.values():
        assert job["authorization"] == {
            "type": "Bearer",
            "credentials_file": "llmops_metrics_token",
        }


# --- Grafana ---------------------------------------------------------------------------------


def test_the_dashboard_asks_for_a_prometheus_data_source(dashboard: dict[str, Any]) -> None:
    assert dashboard["__inputs"] == [
        {
            "name": "DS_PROMETHEUS",
            "label": "Prometheus",
            "description": "The Prometheus that scrapes the llmops /metrics endpoint",
            "type": "datasource",
            "pluginId": "prometheus",
            "pluginName": "Prometheus",
        }
    ]
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard["id"] is None and dashboard["uid"]
    sources = [value for key, value in walk(dashboard) if key == "datasource"]
    assert sources
    for source in sources:
        if source["type"] != "grafana":  # the built-in annotations
            assert source == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}


def test_the_dashboard_has_unique_panel_ids_and_queries(dashboard: dict[str, Any]) -> None:
    panels = list(all_panels(dashboard["panels"]))
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), ids
    for panel in panels:
        if panel["type"] != "row":
            assert panel["targets"], panel["title"]
            assert all(target["expr"].strip() for target in panel["targets"]), panel["title"]


def test_the_dashboard_filters_by_feature_and_model(dashboard: dict[str, Any]) -> None:
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables.keys() >= {"feature", "model"}
    for name in ("feature", "model"):
        assert variables[name]["type"] == "query"
        assert variables[name]["definition"].startswith("label_values(")
        assert variables[name]["query"]["query"] == variables[name]["definition"]
    exprs = dashboard_exprs(dashboard)
    assert any('feature=~"$feature"' in expr and 'model=~"$model"' in expr for expr in exprs)


def test_the_dashboard_reads_only_exposed_metrics(dashboard: dict[str, Any]) -> None:
    exprs = dashboard_exprs(dashboard)
    queries = [variable["definition"] for variable in dashboard["templating"]["list"]]
    used: set[str] = set()
    for expr in exprs + queries:
        names = metric_names(expr)
        assert names, f"no llm_ or django_ metric in {expr!r}"
        assert names <= ALLOWED_METRICS, f"{names - ALLOWED_METRICS} in {expr!r}"
        used |= names
    # The panels cover every LLM metric and the HTTP metrics.
    assert LLM_METRICS | {"llm_provider_latency_seconds_bucket"} <= used
    assert any(name.startswith("django_http_") for name in used)


def test_the_dashboard_counts_system_wide_counters_once(dashboard: dict[str, Any]) -> None:
    for expr in dashboard_exprs(dashboard):
        assert_counted_once(expr)
    with pytest.raises(AssertionError):
        assert_counted_once("sum(rate(llm_jobs_total[5m]))")


def test_the_metric_check_catches_an_unknown_name() -> None:
    assert metric_names('sum(rate(llm_job_total{status="llm_x"}[5m]))') == {"llm_job_total"}
    assert not metric_names("llm_job_total") <= ALLOWED_METRICS
    assert metric_names("sum(llm:cost_usd:rate1h) + django_db_execute_total") == {
        "django_db_execute_total"
    }


def test_every_dashboard_query_is_valid_promql(
    promtool: str, dashboard: dict[str, Any], tmp_path: Path
) -> None:
    """Each expression, Grafana's variables filled in, as a recording rule promtool parses."""
    rules = []
    for number, expr in enumerate(dashboard_exprs(dashboard)):
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, expr
        rules.append({"record": f"dashboard:panel_query:{number}", "expr": expr})
    (tmp_path / "dashboard_queries.yml").write_text(
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]})
    )
    result = run(promtool, "check", "rules", tmp_path / "dashboard_queries.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


@pytest.mark.django_db
def test_every_metric_the_dashboard_and_rules_read_is_exposed(
    dashboard: dict[str, Any], rule_groups: list[dict[str, Any]], settings: Any
) -> None:
    """The names above are the ones /metrics really exposes (its # TYPE lines, on a fresh
    database: a counter family is announced before its first sample)."""
    settings.METRICS_TOKEN = "deploy-monitoring-test-token"
    response = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer deploy-monitoring-test-token")
    assert response.status_code == 200
    exposed = set(re.findall(r"^# TYPE (\S+) \S+$", response.content.decode(), re.M))
    exprs = dashboard_exprs(dashboard) + [
        rule["expr"] for group in rule_groups for rule in group["rules"]
    ]
    used = {name for expr in exprs for name in metric_names(expr)}
    families = {HISTOGRAM_SERIES.sub("", name) for name in used}
    assert families, "no metric read"
    assert families - exposed == set()
