"""The metrics count through the hooks of jobs/ and ledger/, which know nothing of them."""

import ast
from pathlib import Path

from jobs import transitions
from ledger import hooks
from metrics.counters import count_cost_entry, count_transition, count_transitions

ROOT = Path(__file__).resolve().parents[2]


def test_it_counts_first_in_every_transition_and_on_every_ledger_row():
    # First: every transition takes the counter rows' locks before a batch's or a pipeline's
    # row, as when jobs/transitions.py counted by itself.
    assert transitions._in_transaction[0] is count_transition
    assert transitions._in_transaction_many_forms[count_transition] is count_transitions
    assert count_cost_entry in hooks._subscribers


def test_it_is_imported_by_no_app_of_the_job_path():
    apps = [
        "jobs",
        "ledger",
        "alerts",
        "ratelimits",
        "batches",
        "pipelines",
        "llmops",
        "api",
        "metrics",
    ]
    apps += ["runtime", "loops"]
    offenders = []
    for app in apps:
        for path in (ROOT / app).rglob("*.py"):
            if path == ROOT / "llmops" / "urls.py":
                continue  # it mounts ops' pages (dashboard, health, django-rq's dashboard)
            for node in ast.walk(ast.parse(path.read_text())):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                if any(name == "ops" or name.startswith("ops.") for name in names):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []
