"""Submit refuses image and document sources the cost bound cannot see, and accepts inline ones."""

import base64

import pytest

from jobs.models import LlmJob
from tests.conftest import job_body

pytestmark = pytest.mark.django_db

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64).decode()
PDF = base64.b64encode(b"%PDF-1.4\n%%EOF\n").decode()


def image(source: dict) -> dict:
    return {"type": "image", "source": source}


def document(source: dict) -> dict:
    return {"type": "document", "source": source}


def user(*blocks: dict) -> list[dict]:
    return [{"role": "user", "content": [*blocks, {"type": "text", "text": "Describe it."}]}]


URL_IMAGE = image({"type": "url", "url": "https://example.com/cat.png"})
BASE64_IMAGE = image({"type": "base64", "media_type": "image/png", "data": PNG})


@pytest.mark.parametrize(
    "messages,field",
    [
        (user(URL_IMAGE), "messages[0].content[0].source"),
        (
            user(document({"type": "url", "url": "https://example.com/report.pdf"})),
            "messages[0].content[0].source",
        ),
        (
            user(image({"type": "file", "file_id": "file_011CNha8"})),
            "messages[0].content[0].source",
        ),
        (
            user(document({"type": "file", "file_id": "file_011CNha8"})),
            "messages[0].content[0].source",
        ),
        (user({"type": "image"}), "messages[0].content[0].source"),
        (
            user(image({"type": "base64", "media_type": "image/tiff", "data": PNG})),
            "messages[0].content[0].source",
        ),
        (
            user(image({"type": "base64", "media_type": ["image/png"], "data": PNG})),
            "messages[0].content[0].source",
        ),
        (
            user(image({"type": "base64", "media_type": "image/png", "data": ""})),
            "messages[0].content[0].source",
        ),
        (
            user(document({"type": "base64", "media_type": "image/png", "data": PDF})),
            "messages[0].content[0].source",
        ),
        (
            user(document({"type": "content", "content": [URL_IMAGE]})),
            "messages[0].content[0].source.content[0].source",
        ),
        (
            [
                {"role": "user", "content": "Look up the chart."},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "toolu_1", "name": "chart", "input": {}}
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_1",
                            "content": [{"type": "text", "text": "Here:"}, URL_IMAGE],
                        }
                    ],
                },
            ],
            "messages[2].content[0].content[1].source",
        ),
    ],
)
def test_a_source_the_bound_cannot_see_is_refused_with_its_path(alice_client, messages, field):
    response = alice_client.post("/api/v1/jobs/", job_body(messages=messages), format="json")
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "invalid_messages"
    assert body["detail"] == {"field": field}
    assert field in body["message"]
    assert LlmJob.objects.count() == 0


def test_a_url_source_is_named_in_the_message(alice_client):
    response = alice_client.post("/api/v1/jobs/", job_body(messages=user(URL_IMAGE)), format="json")
    assert "'url'" in response.json()["message"]


@pytest.mark.parametrize(
    "block",
    [
        BASE64_IMAGE,
        document({"type": "base64", "media_type": "application/pdf", "data": PDF}),
        document({"type": "text", "media_type": "text/plain", "data": "Quarterly figures..."}),
        document({"type": "content", "content": [{"type": "text", "text": "A note."}]}),
        document({"type": "content", "content": "A note."}),
        document({"type": "content", "content": [BASE64_IMAGE]}),
    ],
)
def test_an_inline_source_is_accepted(alice_client, block):
    response = alice_client.post("/api/v1/jobs/", job_body(messages=user(block)), format="json")
    assert response.status_code == 202, response.content
    job = LlmJob.objects.get(id=response.json()["id"])
    assert job.messages[0]["content"][0] == block


def test_a_tool_result_carrying_an_inline_image_is_accepted(alice_client):
    messages = [
        {"role": "user", "content": "Look up the chart."},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "chart", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [BASE64_IMAGE]},
            ],
        },
    ]
    response = alice_client.post("/api/v1/jobs/", job_body(messages=messages), format="json")
    assert response.status_code == 202, response.content
