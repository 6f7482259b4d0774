"""manage.py llm_costs: the cost report as an aligned table (or CSV), from the same figures as
the API; bad options name the option."""

import csv
import io
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from tests.ledger.cost_data import Ledger, build_ledger, expected_report


@pytest.fixture
def ledger(alice: Any, bob: Any) -> Ledger:
    return build_ledger(alice, bob)


def llm_costs(*args: str) -> str:
    out = io.StringIO()
    call_command("llm_costs", *args, stdout=out)
    return out.getvalue()


def figures(row: dict[str, Any]) -> list[str]:
    tokens = row["tokens"]
    return [
        str(row["jobs"]),
        str(row["attempts"]),
        *(str(tokens[kind]) for kind in tokens),
        row["cost_usd"],
        str(row["failures"]),
        row["batch_saved_usd"],
    ]


def test_it_prints_an_aligned_table_with_a_totals_line(ledger: Ledger) -> None:
    text = llm_costs("--by", "feature", "--since", "7d")

    title, header, rule, *rows, rule_again, totals = text.rstrip("\n").split("\n")
    assert title.startswith("Costs by feature, ")
    assert header.split() == [
        "feature",
        "jobs",
        "attempts",
        "input_tokens",
        "output_tokens",
        "cache_write_5m_tokens",
        "cache_write_1h_tokens",
        "cache_read_tokens",
        "cost_usd",
        "failures",
        "batch_saved_usd",
    ]
    assert rule == rule_again and set(rule) == {"-", " "}
    # Numbers are right-aligned: every line ends in the same column.
    assert {len(line) for line in [header, rule, *rows, totals]} == {len(rule)}
    # By cost: summarize (0.0043) before classify (0.0025).
    assert [row.split()[0] for row in rows] == ["summarize", "classify"]
    assert totals.split() == [
        "TOTAL", "3", "4", "1500", "300", "5", "10", "50", "0.006800", "1", "0.000000"
    ]  # fmt: skip


def test_it_prints_the_figures_of_the_ledger_as_csv(ledger: Ledger) -> None:
    since, until = ledger.now - timedelta(days=60), ledger.now + timedelta(minutes=1)
    text = llm_costs(
        "--by", "day", "--since", since.isoformat(), "--until", until.isoformat(),
        "--format", "csv",
    )  # fmt: skip

    header, *rows, totals = list(csv.reader(io.StringIO(text)))
    want = expected_report(ledger, group_by="day", since=since, until=until)
    assert header[0] == "day"
    assert rows == [[row["key"], *figures(row)] for row in want["rows"]]
    assert totals == ["TOTAL", *figures(want["totals"])]


def test_it_filters_by_user_model_and_feature(ledger: Ledger, bob: Any) -> None:
    text = llm_costs(
        "--by", "model", "--since", "60d", "--user", "bob", "--feature", "summarize",
        "--model", "claude-haiku-4-5", "--format", "csv",
    )  # fmt: skip

    assert list(csv.reader(io.StringIO(text)))[1:] == [
        ["claude-haiku-4-5", "1", "1", "7", "0", "0", "0", "0", "1.000000", "1", "0.000000"],
        ["TOTAL", "1", "1", "7", "0", "0", "0", "0", "1.000000", "1", "0.000000"],
    ]


def test_it_prints_an_empty_report_with_zero_totals(db: None) -> None:
    text = llm_costs("--by", "user")

    *_, rule, totals = text.rstrip("\n").split("\n")
    assert totals.split() == [
        "TOTAL", "0", "0", "0", "0", "0", "0", "0", "0.000000", "0", "0.000000"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "last week"], "--since: "),
        (["--until", "2025-13-01"], "--until: "),
        (["--since", "1d", "--until", "2d"], "--since: since must be before until"),
        (["--user", "nobody"], "--user: "),
    ],
)
def test_it_names_the_bad_option(db: None, args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        llm_costs(*args)
