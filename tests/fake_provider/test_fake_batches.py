"""The fake provider's Message Batches API (fake_provider/batches.py), driven by the real anthropic
SDK against the `manage.py fake_anthropic` process: the SDK's own parsing proves the wire format."""

import json
import time
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from typing import Any, cast

import anthropic
import httpx
import pytest
from anthropic.types.messages.batch_create_params import Request

from fake_provider import FakeProviderState, batches
from tests.conftest import FakeProvider

MODEL = "claude-sonnet-4-6"
KEY = {"x-api-key": "test"}


@pytest.fixture
def fake(fake_provider: FakeProvider) -> FakeProvider:
    """The fake provider, reset, with batches that take half a second."""
    configure(fake_provider, batch_processing_seconds=0.5)
    return fake_provider


@pytest.fixture
def client(fake: FakeProvider) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="test", base_url=fake.url, max_retries=0)


def configure(fake: FakeProvider, **body: Any) -> None:
    response = fake.http.post("/_fake/faults", json=body)
    assert response.status_code == 200, response.text


def request(custom_id: str, text: str = "", model: str = MODEL, **params: Any) -> Request:
    content = text or f"Classify ticket {custom_id}"
    body = {
        "custom_id": custom_id,
        "params": {
            "model": model,
            "max_tokens": 128,
            "messages": [{"role": "user", "content": content}],
            **params,
        },
    }
    return cast(Request, body)


def wait_until(check: Callable[[], Any], seconds: float = 20, what: str = "it") -> Any:
    deadline = time.monotonic() + seconds
    while not (value := check()):
        assert time.monotonic() < deadline, f"{what} did not happen in {seconds} s"
        time.sleep(0.05)
    return value


def ended(client: anthropic.Anthropic, batch_id: str) -> Any:
    """The batch once it has ended; its counts always add up to its requests meanwhile, and its
    succeeded count never goes back."""
    seen: list[Any] = []

    def poll() -> Any:
        batch = client.messages.batches.retrieve(batch_id)
        seen.append(batch.request_counts)
        return batch if batch.processing_status == "ended" else None

    batch = wait_until(poll, what=f"the end of {batch_id}")
    totals = {sum(counts.model_dump().values()) for counts in seen}
    assert len(totals) == 1
    succeeded = [counts.succeeded for counts in seen]
    assert succeeded == sorted(succeeded)
    return batch


def billing(fake: FakeProvider) -> list[dict[str, Any]]:
    return list(fake.http.get("/_fake/billing").json()["calls"])


def test_it_creates_a_batch_that_ends_with_every_request_succeeded(
    client: anthropic.Anthropic, fake: FakeProvider
) -> None:
    raw = client.messages.batches.with_raw_response.create(
        requests=[request(f"ticket-{i}") for i in range(6)]
    )
    assert raw.status_code == 200 and raw.headers["request-id"].startswith("req_")
    batch = raw.parse()
    assert batch.id.startswith("msgbatch_") and batch.type == "message_batch"
    assert batch.processing_status == "in_progress"
    assert batch.request_counts.model_dump() == {
        "processing": 6,
        "succeeded": 0,
        "errored": 0,
        "canceled": 0,
        "expired": 0,
    }
    assert batch.expires_at - batch.created_at == timedelta(hours=24)
    assert batch.ended_at is batch.results_url is batch.cancel_initiated_at is None
    assert batch.archived_at is None

    done = ended(client, batch.id)
    assert done.request_counts.succeeded == 6 and done.request_counts.processing == 0
    assert done.ended_at is not None and done.created_at < done.ended_at
    assert done.results_url == f"{fake.url}/v1/messages/batches/{batch.id}/results"
    assert fake.stats()["batch_requests"] == 6
    assert fake.stats()["batch_results"]["succeeded"] == 6
    assert fake.stats()["requests"] == 0  # the Messages API's counters are its own


def test_its_counts_move_from_processing_to_succeeded_as_items_end(
    client: anthropic.Anthropic, fake: FakeProvider
) -> None:
    configure(fake, batch_processing_seconds=5)  # an item ends every half second
    created = client.messages.batches.create(requests=[request(f"p-{i}") for i in range(10)])

    def partway() -> Any:
        counts = client.messages.batches.retrieve(created.id).request_counts
        return counts if 0 < counts.succeeded < 10 else None

    counts = wait_until(partway, what="a batch partway through")
    assert counts.processing == 10 - counts.succeeded
    assert len(billing(fake)) >= counts.succeeded  # each item is billed as it ends
    assert ended(client, created.id).request_counts.succeeded == 10


def test_its_results_are_jsonl_lines_with_the_answer_the_messages_api_gives(
    client: anthropic.Anthropic, fake: FakeProvider
) -> None:
    texts = {f"q-{i}": f"Summarise order number {i}" for i in range(5)}
    created = client.messages.batches.create(
        requests=[request(custom_id, text) for custom_id, text in texts.items()]
    )
    ended(client, created.id)
    results = {line.custom_id: line.result for line in client.messages.batches.results(created.id)}
    assert set(results) == set(texts)
    for custom_id, text in texts.items():
        result = results[custom_id]
        assert result.type == "succeeded"
        direct = client.messages.create(
            model=MODEL, max_tokens=128, messages=[{"role": "user", "content": text}]
        )
        assert result.message.content == direct.content
        assert result.message.usage == direct.usage
        assert result.message.id.startswith("msg_") and result.message.model == MODEL

    raw = httpx.get(f"{fake.url}/v1/messages/batches/{created.id}/results", headers=KEY)
    assert raw.status_code == 200
    assert raw.headers["content-type"] == "application/x-jsonl"
    assert f"{created.id}_results.jsonl" in raw.headers["content-disposition"]
    lines = raw.text.splitlines()
    assert len(lines) == 5 and raw.text.endswith("\n")
    assert {json.loads(line)["custom_id"] for line in lines} == set(texts)


def test_shares_of_its_items_end_errored_or_expired_and_bill_nothing(
    client: anthropic.Anthropic, fake: FakeProvider
) -> None:
    configure(fake, batch_errored_rate=0.3, batch_expired_rate=0.3)
    requests = [request(f"item-{i}") for i in range(40)]
    requests.append(request("unknown-model", model="claude-nonexistent"))
    created = client.messages.batches.create(requests=requests)
    counts = ended(client, created.id).request_counts
    assert counts.succeeded + counts.errored + counts.expired == 41
    assert counts.succeeded > 0 and counts.errored > 1 and counts.expired > 0

    results = {line.custom_id: line.result for line in client.messages.batches.results(created.id)}
    unknown = results.pop("unknown-model")
    assert unknown.type == "errored"
    assert unknown.error.error.type == "not_found_error"
    assert unknown.error.error.message == "model: claude-nonexistent"
    kinds = [result.type for result in results.values()]
    assert kinds.count("errored") == counts.errored - 1
    assert kinds.count("expired") == counts.expired
    for result in results.values():
        if result.type == "errored":
            assert result.error.type == "error"
            assert result.error.error.type in ("api_error", "overloaded_error")
    billed = billing(fake)
    assert sorted(call["custom_id"] for call in billed) == sorted(
        custom_id for custom_id, result in results.items() if result.type == "succeeded"
    )
    assert fake.stats()["batch_results"] == {
        "succeeded": counts.succeeded,
        "errored": counts.errored,
        "canceled": 0,
        "expired": counts.expired,
    }


def test_a_canceled_batch_goes_canceling_then_ended_with_its_items_canceled(
    client: anthropic.Anthropic, fake: FakeProvider
) -> None:
    configure(fake, batch_processing_seconds=3600)  # nothing ends on its own during the test
    created = client.messages.batches.create(requests=[request(f"slow-{i}") for i in range(4)])
    canceling = client.messages.batches.cancel(created.id)
    assert canceling.processing_status == "canceling"
    assert canceling.cancel_initiated_at is not None and canceling.ended_at is None
    assert canceling.request_counts.processing == 4

    done = ended(client, created.id)
    assert done.request_counts.canceled == 4 and done.request_counts.processing == 0
    assert done.cancel_initiated_at == canceling.cancel_initiated_at
    results = list(client.messages.batches.results(created.id))
    assert sorted(line.custom_id for line in results) == [f"slow-{i}" for i in range(4)]
    assert {line.result.type for line in results} == {"canceled"}
    assert billing(fake) == []
    assert fake.stats()["billed"]["cost_usd"] == "0"
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.batches.cancel(created.id)
    assert "already ended" in str(caught.value.api_message)


def test_it_refuses_results_and_deletion_before_the_batch_ends(
    client: anthropic.Anthropic, fake: FakeProvider
) -> None:
    configure(fake, batch_processing_seconds=3600)
    created = client.messages.batches.create(requests=[request("a")])
    with pytest.raises(anthropic.AnthropicError, match="results_url"):
        client.messages.batches.results(created.id)  # the SDK sees no results_url yet
    direct = httpx.get(f"{fake.url}/v1/messages/batches/{created.id}/results", headers=KEY)
    assert direct.status_code == 400
    assert direct.json()["error"]["type"] == "invalid_request_error"
    assert "has not finished processing" in direct.json()["error"]["message"]
    with pytest.raises(anthropic.BadRequestError, match="still processing"):
        client.messages.batches.delete(created.id)

    client.messages.batches.cancel(created.id)
    ended(client, created.id)
    deleted = client.messages.batches.delete(created.id)
    assert deleted.id == created.id and deleted.type == "message_batch_deleted"
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve(created.id)


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        ([request("same"), request("same")], "requests.1.custom_id: 'same' is used by an earlier"),
        ([request("x" * 65)], "requests.0.custom_id: String should match pattern"),
        ([request("has space")], "requests.0.custom_id: String should match pattern"),
        ([request("")], "requests.0.custom_id: String should match pattern"),
        (
            [request("ok"), {"custom_id": "no-max", "params": {"model": MODEL, "messages": []}}],
            "requests.1.params.max_tokens: Field required",
        ),
        ([request("streamed", stream=True)], "requests.0.params.stream: Input should be False"),
        ([request("zero", max_tokens=0)], "requests.0.params.max_tokens: Input should be greater"),
        ([{"params": request("p")["params"]}], "requests.0.custom_id: Field required"),
        ([], "requests: a batch holds 1 to 100000 requests, not 0"),
    ],
    ids=[
        "duplicate",
        "too-long",
        "space",
        "empty-id",
        "bad-params",
        "stream",
        "zero-max-tokens",
        "no-custom-id",
        "empty",
    ],
)
def test_it_validates_a_batch_like_anthropic(
    client: anthropic.Anthropic, requests: list[Any], message: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.batches.create(requests=requests)
    assert caught.value.status_code == 400
    assert caught.value.type == "invalid_request_error"
    assert str(caught.value.api_message).startswith(message)
    assert list(client.messages.batches.list()) == []  # nothing was created


def test_it_refuses_more_than_100000_requests_and_a_call_without_a_key(fake: FakeProvider) -> None:
    tiny = {"model": MODEL, "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}
    body = {"requests": [{"custom_id": f"r{i}", "params": tiny} for i in range(100_001)]}
    response = fake.http.post("/v1/messages/batches", json=body, headers=KEY)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "requests: a batch holds 1 to 100000 requests, not 100001"
    )
    for method, path in [
        ("POST", "/v1/messages/batches"),
        ("GET", "/v1/messages/batches"),
        ("GET", "/v1/messages/batches/msgbatch_x/results"),
    ]:
        anonymous = fake.http.request(method, path, json={"requests": [request("a")]})
        assert anonymous.status_code == 401
        assert anonymous.json()["error"]["type"] == "authentication_error"
    assert fake.http.get("/v1/messages/batches/msgbatch_unknown", headers=KEY).status_code == 404
    assert fake.stats()["batch_requests"] == 0


def test_it_bills_succeeded_items_at_half_the_standard_price(
    client: anthropic.Anthropic, fake: FakeProvider
) -> None:
    prompts = [
        (f"bill-{i}", f"Write a note about shipment {i}", model)
        for i, model in enumerate(["claude-opus-4-1", MODEL, "claude-haiku-4-5", MODEL])
    ]
    created = client.messages.batches.create(
        requests=[request(custom_id, text, model) for custom_id, text, model in prompts]
    )
    ended(client, created.id)
    stats = fake.stats()
    batch_cost = Decimal(stats["billed"]["batch_cost_usd"])
    assert batch_cost > 0 and Decimal(stats["billed"]["cost_usd"]) == batch_cost
    calls = billing(fake)
    assert sorted(call["custom_id"] for call in calls) == [p[0] for p in prompts]
    assert {(call["how"], call["batch_id"]) for call in calls} == {("batch", created.id)}
    assert sum(Decimal(call["cost_usd"]) for call in calls) == batch_cost
    batch_tokens = stats["billed"]["output_tokens"]

    fake.reset()  # the same prompts through POST /v1/messages, at the standard price
    for _, text, model in prompts:
        client.messages.create(
            model=model, max_tokens=128, messages=[{"role": "user", "content": text}]
        )
    standard = fake.stats()["billed"]
    assert standard["output_tokens"] == batch_tokens
    assert Decimal(standard["cost_usd"]) == 2 * batch_cost
    assert standard["batch_cost_usd"] == "0"


def test_it_lists_batches_newest_first_a_page_at_a_time(client: anthropic.Anthropic) -> None:
    ids = [client.messages.batches.create(requests=[request(f"b{i}")]).id for i in range(3)]
    newest_first = ids[::-1]
    page = client.messages.batches.list(limit=2)
    assert [batch.id for batch in page.data] == newest_first[:2]
    assert page.has_more is True
    assert (page.first_id, page.last_id) == (newest_first[0], newest_first[1])
    assert [batch.id for batch in client.messages.batches.list(limit=2)] == newest_first
    older = client.messages.batches.list(after_id=newest_first[0])
    assert [batch.id for batch in older.data] == newest_first[1:] and older.has_more is False
    newer = client.messages.batches.list(before_id=newest_first[2], limit=1)
    assert [batch.id for batch in newer.data] == [newest_first[1]] and newer.has_more is True


def test_a_reset_clears_the_batches(client: anthropic.Anthropic, fake: FakeProvider) -> None:
    created = client.messages.batches.create(requests=[request("gone")])
    ended(client, created.id)
    fake.reset()
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve(created.id)
    assert list(client.messages.batches.list()) == []
    stats = fake.stats()
    assert stats["batch_requests"] == 0 and stats["billed"]["batch_cost_usd"] == "0"
    assert fake.http.get("/_fake/faults").json()["batch_processing_seconds"] == 1.0


@pytest.mark.parametrize(
    "body",
    [
        {"batch_processing_seconds": -1},
        {"batch_processing_seconds": 90_000},
        {"batch_errored_rate": 1.5},
        {"batch_expired_rate": "half"},
    ],
)
def test_it_rejects_a_bad_batch_setting(fake: FakeProvider, body: dict[str, Any]) -> None:
    response = fake.http.post("/_fake/faults", json=body)
    assert response.status_code == 400
    assert next(iter(body)) in response.json()["error"]["message"]


def test_it_forgets_the_oldest_ended_batches_past_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(batches, "MAX_BATCHES_KEPT", 3)
    state = FakeProviderState(seed=1)
    state.update_config(state.with_changes(batch_processing_seconds=0.0))

    def call(method: str, path: str, body: Any = None) -> Any:
        raw = json.dumps(body).encode() if body is not None else b""
        answer = batches.handle(state, method, path, KEY, "", raw, "http://fake")
        return answer.status, json.loads(answer.body)

    slow = call("POST", batches.BATCHES_PATH, {"requests": [request("slow")]})[1]["id"]
    state.update_config(state.with_changes(batch_processing_seconds=3600.0))
    still = call("POST", batches.BATCHES_PATH, {"requests": [request("still")]})[1]["id"]
    state.update_config(state.with_changes(batch_processing_seconds=0.0))
    ids = [call("POST", batches.BATCHES_PATH, {"requests": [request("x")]})[1]["id"]]
    assert call("GET", f"{batches.BATCHES_PATH}/{slow}")[1]["processing_status"] == "ended"
    ids.append(call("POST", batches.BATCHES_PATH, {"requests": [request("y")]})[1]["id"])
    kept = [batch["id"] for batch in call("GET", batches.BATCHES_PATH)[1]["data"]]
    assert kept == [ids[1], ids[0], still]  # the oldest ended one went; the unfinished stays
    assert call("GET", f"{batches.BATCHES_PATH}/{slow}")[0] == 404
