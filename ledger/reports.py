"""A cost report as lines of text cells: one shape for the command's table and both CSVs."""

from ledger.selectors import TOKEN_KINDS, CostReport, CostReportRow

__all__ = ["REPORT_COLUMNS", "report_csv_rows"]

REPORT_COLUMNS = [
    "jobs",
    "attempts",
    *(f"{kind}_tokens" for kind in TOKEN_KINDS),
    "cost_usd",
    "failures",
    "batch_saved_usd",
]
"""The figures of a row, after its key, in the order every export prints them."""


def _cells(row: CostReportRow) -> list[str]:
    return [
        str(row.jobs),
        str(row.attempts),
        *(str(row.tokens[kind]) for kind in TOKEN_KINDS),
        f"{row.cost_usd:.6f}",
        str(row.failures),
        f"{row.batch_saved_usd:.6f}",
    ]


def report_csv_rows(report: CostReport) -> list[list[str]]:
    """Header, one line per group (an unnamed group, such as rows without a user, is
    ``(none)``), then the totals line."""
    lines = [[report.group_by, *REPORT_COLUMNS]]
    lines += [[row.key if row.key is not None else "(none)", *_cells(row)] for row in report.rows]
    lines.append(["TOTAL", *_cells(report.totals)])
    return lines
