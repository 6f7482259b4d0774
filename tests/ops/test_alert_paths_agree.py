"""The application's alerts and deploy/prometheus/rules.yml agree where both watch one condition.

The application is the source of truth for budgets, the queue wait, the breaker and critical dead
letters (docs/operations.md, "Two alerting paths"); each Prometheus rule on the same condition is
its backstop. promtool evaluates those rules against series built from the application's own
defaults (read from a fresh settings import and the models, not copied here): each fires exactly
from the application's threshold, with the application's severity in lowercase. A threshold or a
severity changed on one side only fails here. Every metric a rule reads is one the application's
collector exports.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs.breaker import ACCOUNT_WIDE_REASONS, PROVIDER
from jobs.models import Severity
from jobs.retry_policy import classification_of
from ledger.budgets import BUDGET_ALERT_SEVERITIES
from ledger.models import Budget
from loops.queue_health import QUEUE_WAIT_SEVERITY
from metrics.collector import LlmCollector

ROOT = Path(__file__).resolve().parent.parent.parent
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"

SHARED_RULES = {
    "LlmBudgetNearlyExhausted",
    "LlmBudgetExhausted",
    "LlmQueueWaitHigh",
    "LlmProviderBreakerOpen",
    "LlmCriticalFailure",
}
"""The rules on a condition the application alerts on too (the table in docs/operations.md)."""

EVAL = "10m"
"""Past every shared rule's ``for``: the series below are constant (or steady) from minute 0."""


def app_defaults() -> dict[str, Any]:
    """The settings' defaults, from an import of llmops.settings in an empty environment: what
    ships, whatever this test process was started with."""
    code = (
        "import json, llmops.settings as s; "
        "print(json.dumps({'queue_wait': s.ALERT_QUEUE_WAIT_THRESHOLDS}))"
    )
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/")}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    defaults: dict[str, Any] = json.loads(result.stdout)
    defaults["soft_ratio"] = Budget._meta.get_field("soft_alert_percent").default / 100
    return defaults


def prometheus_severity(severity: str) -> str:
    """The application's severity as rules.yml spells it (as llm_failures_total does)."""
    assert severity in Severity.values, severity
    return severity.lower()


def alert(labels: dict[str, str]) -> dict[str, Any]:
    return {"exp_labels": labels}


def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    spelled = ", ".join(f'{key}="{value}"' for key, value in labels.items())
    return {"series": f"{name}{{{spelled}}}", "values": values}


def unit_tests(defaults: dict[str, Any]) -> list[dict[str, Any]]:
    """promtool unit tests of the shared rules, built from the application's side."""
    soft = defaults["soft_ratio"]
    budget = {"scope": "feature"}
    cases: list[dict[str, Any]] = [
        {
            # Under the soft percent, at it, and spent: the app warns at it, errs when spent.
            "input_series": [
                series("llm_budget_used_ratio", {**budget, "name": "under"}, f"{soft - 0.001}x15"),
                series("llm_budget_used_ratio", {**budget, "name": "at"}, f"{soft}x15"),
                series("llm_budget_used_ratio", {**budget, "name": "spent"}, "1x15"),
            ],
            "alert_rule_test": [
                {
                    "eval_time": EVAL,
                    "alertname": "LlmBudgetNearlyExhausted",
                    "exp_alerts": [
                        alert(
                            {
                                **budget,
                                "name": "at",
                                "severity": prometheus_severity(BUDGET_ALERT_SEVERITIES["soft"]),
                            }
                        )
                    ],
                },
                {
                    "eval_time": EVAL,
                    "alertname": "LlmBudgetExhausted",
                    "exp_alerts": [
                        alert(
                            {
                                **budget,
                                "name": "spent",
                                "severity": prometheus_severity(
                                    BUDGET_ALERT_SEVERITIES["exhausted"]
                                ),
                            }
                        )
                    ],
                },
            ],
        },
    ]
    # The app alerts on a wait over its queue's threshold (not at it): queue_health.QueueWait.
    for queue, threshold in defaults["queue_wait"].items():
        for wait, fires in ((threshold, False), (threshold + 1, True)):
            labels = {"queue": queue, "severity": prometheus_severity(QUEUE_WAIT_SEVERITY)}
            cases.append(
                {
                    "input_series": [
                        series("llm_queue_oldest_job_age_seconds", {"queue": queue}, f"{wait}x15")
                    ],
                    "alert_rule_test": [
                        {
                            "eval_time": EVAL,
                            "alertname": "LlmQueueWaitHigh",
                            "exp_alerts": [alert(labels)] if fires else [],
                        }
                    ],
                }
            )
    # What opens the breaker dead-letters its job at one severity: the breaker rule's.
    (breaker_severity,) = {classification_of(reason).severity for reason in ACCOUNT_WIDE_REASONS}
    failures = [
        series(
            "llm_failures_total",
            {"severity": prometheus_severity(severity), "reason": f"a_{severity.lower()}_reason"},
            "0+1x15",
        )
        for severity in Severity.values
    ]
    cases.append(
        {
            "input_series": [
                series("llm_breaker_open", {"provider": PROVIDER}, "1x15"),
                series("llm_queue_depth", {"queue": "llm"}, "0x15"),
                *failures,
            ],
            "alert_rule_test": [
                {
                    "eval_time": EVAL,
                    "alertname": "LlmProviderBreakerOpen",
                    "exp_alerts": [
                        alert(
                            {
                                "provider": PROVIDER,
                                "severity": prometheus_severity(breaker_severity),
                            }
                        )
                    ],
                },
                {
                    # Only the CRITICAL dead letters page, as the app's routing does.
                    "eval_time": EVAL,
                    "alertname": "LlmCriticalFailure",
                    "exp_alerts": [
                        alert({"reason": "a_critical_reason", "severity": "critical"}),
                    ],
                },
            ],
        }
    )
    for case in cases:
        case["interval"] = "1m"
    return cases


def shared_rules_only(rules_text: str) -> dict[str, Any]:
    """rules.yml with only the shared alerts, annotations left out (the unit tests compare
    labels; the annotations have their own tests in rules_test.yml)."""
    groups = yaml.safe_load(rules_text)["groups"]
    kept = []
    for group in groups:
        rules = [
            {key: value for key, value in rule.items() if key != "annotations"}
            for rule in group["rules"]
            if rule.get("alert") in SHARED_RULES
        ]
        if rules:
            kept.append({"name": group["name"], "rules": rules})
    return {"groups": kept}


def promtool_agreement(
    promtool: str, rules_text: str, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    defaults = app_defaults()
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(shared_rules_only(rules_text)))
    (tmp_path / "agree_test.yml").write_text(
        yaml.safe_dump(
            {
                "rule_files": ["rules.yml"],
                "evaluation_interval": "1m",
                "tests": unit_tests(defaults),
            }
        )
    )
    return subprocess.run(
        [promtool, "test", "rules", "agree_test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: run scripts/prometheus-deps.sh (or `make tools`)")
    return path


def test_every_shared_condition_has_its_rule() -> None:
    alerts = {
        rule["alert"]
        for group in yaml.safe_load(RULES.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    assert SHARED_RULES <= alerts


def test_the_rules_fire_from_the_apps_thresholds_with_its_severities(
    promtool: str, tmp_path: Path
) -> None:
    result = promtool_agreement(promtool, RULES.read_text(), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize(
    ("original", "moved"),
    [
        (">= 0.8 < 1", ">= 0.9 < 1"),  # the budget warning
        ('{queue="llm"}) > 60', '{queue="llm"}) > 300'),  # the queue wait
        ("severity: error", "severity: critical"),  # the exhausted budget
    ],
)
def test_a_rule_changed_alone_disagrees(
    promtool: str, tmp_path: Path, original: str, moved: str
) -> None:
    rules = RULES.read_text()
    assert rules.count(original) == 1, original
    result = promtool_agreement(promtool, rules.replace(original, moved), tmp_path)
    assert result.returncode != 0, result.stdout


def test_a_default_changed_alone_disagrees(
    promtool: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The application's side moved: the soft percent's default and the budget severity."""
    field = Budget._meta.get_field("soft_alert_percent")
    monkeypatch.setattr(field, "default", 90)
    assert promtool_agreement(promtool, RULES.read_text(), tmp_path).returncode != 0
    monkeypatch.setattr(field, "default", 80)
    monkeypatch.setitem(BUDGET_ALERT_SEVERITIES, "exhausted", Severity.CRITICAL)
    assert promtool_agreement(promtool, RULES.read_text(), tmp_path).returncode != 0


METRIC_NAME = re.compile(r"(?<![\w:])llm_\w+")
LABEL_VALUES = re.compile(r'"(?:[^"\\]|\\.)*"')


def exported_series_names() -> set[str]:
    """The series names of the application's collector, as Prometheus stores them."""
    names = set()
    for family in LlmCollector().collect():
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names |= {f"{family.name}_{suffix}" for suffix in ("bucket", "sum", "count")}
        else:
            names.add(family.name)
    return names


@pytest.mark.django_db
def test_every_llm_metric_a_rule_reads_is_one_the_app_exports() -> None:
    exported = exported_series_names()
    assert {"llm_budget_used_ratio", "llm_queue_oldest_job_age_seconds"} <= exported
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            read = set(METRIC_NAME.findall(LABEL_VALUES.sub('""', rule["expr"])))
            assert read <= exported, f"{rule.get('alert') or rule.get('record')}: {read - exported}"
