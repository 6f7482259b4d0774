"""The agent runs API's request bodies as the OpenAPI schema describes them (/api/schema/).
Only a description: agents/validation.py enforces the body."""

from drf_spectacular.utils import OpenApiExample
from rest_framework import serializers

from agents.models import AgentRun
from agents.validation import DEFAULT_MAX_TURNS, MAX_TURNS
from jobs.priorities import PRIORITY_CHOICES
from webhooks.validation import MAX_CALLBACK_URL_LENGTH

__all__ = [
    "SUBMIT_EXAMPLE",
    "AgentRunSubmitSerializer",
    "AgentRunSubmittedSerializer",
    "ApprovalSerializer",
]


class AgentRunSubmitSerializer(serializers.Serializer):
    """``POST /api/v1/agent-runs/``: no other field is accepted (``unknown_field``)."""

    feature = serializers.CharField(help_text="A slug; budgets and costs are kept per feature.")
    model = serializers.CharField(help_text="A priced model, e.g. claude-sonnet-4-6.")
    messages = serializers.ListField(
        child=serializers.DictField(), help_text="The first messages, as for a job."
    )
    max_tokens = serializers.IntegerField(min_value=1, help_text="Per model turn.")
    tools = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="Names of registered tools (`unknown_tool` names the first unknown one).",
    )
    system = serializers.JSONField(required=False, help_text="A string or text blocks.")
    max_turns = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_TURNS, default=DEFAULT_MAX_TURNS
    )
    max_cost_usd = serializers.DecimalField(
        required=False,
        max_digits=16,
        decimal_places=6,
        coerce_to_string=True,
        help_text="No turn, nor any attempt of a turn (a retry, a fallback), starts whose worst "
        "case would pass it (`max_cost_exceeded`).",
    )
    metadata = serializers.DictField(required=False)
    deadline = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="ISO 8601: every turn's job's deadline; no turn is sent after it (the run "
        "fails `deadline_exceeded`). In the past: `invalid_deadline`.",
    )
    deadline_seconds = serializers.FloatField(
        required=False, allow_null=True, min_value=0, help_text="The deadline, from the submit."
    )
    tags = serializers.ListField(
        child=serializers.SlugField(max_length=64),
        required=False,
        allow_null=True,
        max_length=10,
        help_text="Slugs (lowercased), on the run and every turn's job.",
    )
    priority = serializers.ChoiceField(
        choices=PRIORITY_CHOICES,
        required=False,
        allow_null=True,
        help_text="Every turn's job priority (absent: the feature policy's default, else normal).",
    )
    callback_url = serializers.URLField(
        required=False,
        allow_null=True,
        max_length=MAX_CALLBACK_URL_LENGTH,
        help_text="http(s), no user or password in it: the run's final state (completed, failed, "
        "cancelled) is POSTed there once, signed (`LLM-Signature`), retried until delivered "
        "(else `invalid_callback_url`).",
    )


SUBMIT_EXAMPLE = OpenApiExample(
    "What time is it in Tokyo, times two",
    value={
        "feature": "assistant",
        "model": "claude-sonnet-4-6",
        "max_tokens": 512,
        "tools": ["clock", "calculator"],
        "messages": [{"role": "user", "content": "What time is it in Tokyo? Then compute 6*7."}],
        "max_turns": 5,
        "max_cost_usd": "0.50",
    },
    request_only=True,
)


class AgentRunSubmittedSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=AgentRun.Status.choices)
    status_url = serializers.CharField(help_text="Poll here; also in the Location header.")


class ApprovalSerializer(serializers.Serializer):
    approve = serializers.BooleanField(help_text="true: the tool runs; false: it does not.")
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=2000,
        help_text="Given to the model with a rejection.",
    )
