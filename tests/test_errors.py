"""The one error body, also where no view answers: a URL under /api/ that nothing matches."""

import pytest
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/failures/abc/requeue/",  # the id must be a number: no URL pattern matches
        "/api/v1/budgets/-1/",
        "/api/v1/no-such-thing/",
        "/api/",
    ],
)
def test_it_answers_the_json_error_for_an_api_url_nothing_matches(path):
    response = APIClient().post(path) if "requeue" in path else APIClient().get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"code": "not_found", "message": "Not found.", "detail": None}


def test_it_keeps_djangos_page_outside_the_api():
    response = APIClient().get("/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
