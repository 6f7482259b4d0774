"""The job path reaches a provider through one interface, and only providers/ speaks its SDK."""

import ast
from pathlib import Path

import pytest

from providers.anthropic_api import AnthropicProvider
from providers.base import Provider
from providers.errors import REASONS, failure_reason
from providers.registry import get_provider, provider_for

ROOT = Path(__file__).resolve().parents[2]

# The SDK and the HTTP stack under it: what a provider implementation talks through.
SDK_MODULES = ("anthropic", "openai", "httpx2", "httpcore2")
# The official mcp SDK's transport is httpx2 too: its client is built in the one module that
# speaks MCP (its timeouts and the errors it sorts), never a provider's.
OTHER_SDK_TRANSPORTS = {"mcp_tools/client.py: httpx2"}


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def _project_files() -> list[Path]:
    return [
        path
        for path in sorted(ROOT.rglob("*.py"))
        # bench/ is not installed: its streaming benchmark calls the SDK directly on purpose.
        if not {".venv", "node_modules", "providers", "tests", "bench"}
        & set(path.relative_to(ROOT).parts)
        and not any(part.startswith(".") for part in path.relative_to(ROOT).parts)
    ]


def test_it_is_the_only_app_that_imports_the_sdk():
    files = _project_files()
    assert any(path.parts[-2:] == ("jobs", "runner.py") for path in files)
    offenders = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in files
        for name in sorted(_imported_modules(path))
        if name.split(".")[0] in SDK_MODULES
    ]
    assert sorted(set(offenders) - OTHER_SDK_TRANSPORTS) == []


@pytest.mark.django_db
def test_claude_models_are_served_by_the_anthropic_provider():
    provider = provider_for("claude-haiku-4-5")
    assert isinstance(provider, Provider) and isinstance(provider, AnthropicProvider)
    assert provider is get_provider() and provider.name == "anthropic"


def test_its_limits_are_a_streams(settings):
    settings.LLM_STREAM_IDLE_SECONDS = 60.0
    settings.LLM_PROVIDER_CONNECT_TIMEOUT = 10.0
    settings.LLM_CALL_DEADLINE_SCALE = 2.0
    provider = get_provider()
    assert not hasattr(provider, "max_tokens_limit")  # the model's own limit is the price's
    assert provider.read_timeout_for(256) == provider.read_timeout_for(64_000) == 60.0
    assert provider.call_deadline_for(8192) == pytest.approx(10 + 2 * 8192 * 3600 / 128_000)


@pytest.mark.parametrize(
    "observation,reason",
    [
        ({"kind": "read_timeout"}, "read_timeout"),
        ({"kind": "error_response", "http_status": 529}, "overloaded"),
        # An overloaded error type wins over the 5xx it came with.
        ({"kind": "error_response", "http_status": 500, "error_type": "overloaded_error"},
         "overloaded"),
        ({"kind": "error_response", "http_status": 408}, "server_error"),
        ({"kind": "error_response", "http_status": 400, "message": "Context window exceeded"},
         "context_too_long"),
        ({"kind": "error_response", "http_status": None}, "invalid_request"),
    ],
)  # fmt: skip
def test_it_reads_the_reason_from_the_answer(observation, reason):
    assert failure_reason(**observation) == reason
    assert reason in REASONS
