"""The API's own docs as a newcomer opens them: Swagger UI (/api/docs/) lists jobs, the main
resource, first and the rest by importance, not alphabetically, and the schema's description
points to the full reference. Headless Chromium for the page (the ``page`` fixture fails on any
console or HTTP error), the JSON schema for the order itself."""

import pytest
from rest_framework.test import APIClient

from tests.browser.test_dlq_pages import SCREENSHOTS, page  # noqa: F401  (fixture)

SECTIONS = ["jobs", "batches", "pipelines", "costs", "budgets", "failures", "me"]


def schema() -> dict:
    response = APIClient().get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    return response.json()


def test_the_schema_lists_its_sections_by_importance_and_points_to_the_reference() -> None:
    served = schema()
    tags = [tag["name"] for tag in served["tags"]]
    assert tags[: len(SECTIONS)] == SECTIONS
    assert all(tag.get("description") for tag in served["tags"][: len(SECTIONS)])
    used = {tag for operations in served["paths"].values() for op in operations.values()
            for tag in op.get("tags", [])}  # fmt: skip
    assert set(SECTIONS) <= used, "a section no operation carries"
    assert "Full reference: `docs/api.md`" in served["info"]["description"]


@pytest.mark.django_db(transaction=True)
def test_swagger_ui_shows_jobs_first(page, live_server) -> None:  # noqa: F811
    page.goto(f"{live_server.url}/api/docs/")
    page.wait_for_selector(".opblock-tag-section h3[data-tag]")
    shown = page.locator(".opblock-tag-section h3[data-tag]").evaluate_all(
        "(headings) => headings.map((h) => h.dataset.tag)"
    )
    assert shown[: len(SECTIONS)] == SECTIONS
    assert "docs/api.md" in page.locator(".information-container").inner_text()
    page.screenshot(path=SCREENSHOTS / "api-docs.png")
