"""docs/guarantees.md names, for each guarantee, tests that exist: every row names at least one
``file::test``, and each is a test function in that file under tests/."""

import re

from tests.conftest import ROOT

GUARANTEES = ROOT / "docs" / "guarantees.md"


def rows() -> list[tuple[str, list[str]]]:
    found = []
    for line in GUARANTEES.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or cells[0] in ("guarantee", "---"):
            continue
        found.append((cells[0], re.findall(r"`([\w/]+\.py)::(\w+)`", cells[1])))
    return found


def test_every_guarantee_names_a_test_that_exists():
    table = rows()
    assert len(table) > 40
    for guarantee, tests in table:
        assert tests, f"docs/guarantees.md: {guarantee!r} names no test"
        for path, name in tests:
            source = (ROOT / "tests" / path).read_text()
            assert re.search(rf"^(async )?def {name}\(", source, re.M), f"{path}::{name}"
