"""``manage.py llm_costs --by feature --since 7d``: the cost report as an aligned table or CSV."""

import csv
from typing import Any

from django.core.management.base import CommandError, CommandParser

from api.errors import ApplicationError
from ledger.reports import report_csv_rows
from ledger.selectors import REPORT_GROUPS, cost_report, report_range_parse, report_user_find
from llmops.commands import OperatorCommand


class Command(OperatorCommand):
    help = (
        "Print what LLM calls cost from the ledger, grouped by feature, model, user or day: "
        "jobs, attempts, tokens by kind, cost and dead-lettered jobs, with a totals line."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--by", choices=REPORT_GROUPS, default=REPORT_GROUPS[0])
        parser.add_argument(
            "--since", help="7d, 24h, 30m, an ISO date or datetime (UTC); default 30 days ago."
        )
        parser.add_argument(
            "--until", help="As --since; a date includes that whole day. Default: now."
        )
        parser.add_argument("--feature", help="Only this feature.")
        parser.add_argument("--model", help="Only this model.")
        parser.add_argument("--user", help="Only this user (username or id).")
        parser.add_argument("--format", choices=["table", "csv"], default="table")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            since, until = report_range_parse(since=options["since"], until=options["until"])
            user = report_user_find(value=options["user"]) if options["user"] else None
            report = cost_report(
                group_by=options["by"],
                since=since,
                until=until,
                user=user,
                feature=options["feature"],
                model=options["model"],
            )
        except ApplicationError as exc:
            field = (exc.detail or {}).get("field")
            raise CommandError(f"--{field}: {exc.message}" if field else exc.message) from exc
        lines = report_csv_rows(report)
        if options["format"] == "csv":
            csv.writer(self.stdout, lineterminator="\n").writerows(lines)
            return
        self.stdout.write(
            f"Costs by {report.group_by}, {report.since:%Y-%m-%d %H:%M} to "
            f"{report.until:%Y-%m-%d %H:%M} UTC"
        )
        self.stdout.write(render_table(lines))


def render_table(lines: list[list[str]]) -> str:
    """Header, rows, a rule and the totals line (the last one); numbers right-aligned."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]

    def render(line: list[str]) -> str:
        cells = [line[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(line[1:], widths[1:], strict=True)]
        return "  ".join(cells).rstrip()

    header, *rows, totals = lines
    rule = "  ".join("-" * width for width in widths)
    return "\n".join([render(header), rule, *map(render, rows), rule, render(totals)])
