"""The jobs API's bodies as the OpenAPI schema describes them (/api/schema/).

Only a description: ``jobs/validation.py`` and ``jobs/admission.py`` enforce the submit body,
with one stable error code per kind of mistake, and ``JobOutputSerializer`` renders jobs. The
constants come from there, so the schema cannot drift from the rules it describes.
"""

from typing import Any

from drf_spectacular.utils import OpenApiExample, extend_schema_field
from rest_framework import serializers

from jobs.deadlines import MAX_DEADLINE_SECONDS
from jobs.models import LlmJob
from jobs.priorities import PRIORITY_CHOICES
from jobs.tags import MAX_TAG_LENGTH, MAX_TAGS
from jobs.validation import (
    BLOCK_TYPES,
    FEATURE_RE,
    MAX_CONCURRENCY_KEY_LENGTH,
    MAX_FEATURE_LENGTH,
    ROLES,
)
from webhooks.validation import MAX_CALLBACK_URL_LENGTH

__all__ = [
    "JobErrorSerializer",
    "JobOutputTextSerializer",
    "JobSubmitSerializer",
    "JobSubmittedSerializer",
    "JobUsageSerializer",
    "SUBMIT_EXAMPLE",
]


def _blocks(types: set[str]) -> dict[str, Any]:
    # Each block's own fields are checked by jobs/validation.py (e.g. an image's base64
    # source); the schema names the block types and leaves the rest open.
    return {
        "type": "array",
        "minItems": 1,
        "items": {
            "type": "object",
            "required": ["type"],
            "properties": {"type": {"type": "string", "enum": sorted(types)}},
            "additionalProperties": True,
        },
    }


@extend_schema_field(
    {
        "oneOf": [{"type": "string", "minLength": 1}, _blocks(BLOCK_TYPES)],
        "description": "A non-empty string, or a non-empty list of content blocks.",
    }
)
class _ContentField(serializers.JSONField):
    pass


@extend_schema_field(
    {
        "oneOf": [{"type": "string"}, _blocks({"text"})],
        "description": "A string, or a non-empty list of text blocks.",
    }
)
class _SystemField(serializers.JSONField):
    pass


class _MessageSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=sorted(ROLES))
    content = _ContentField()


class JobSubmitSerializer(serializers.Serializer):
    """``POST /api/v1/jobs/``: no other field is accepted (``unknown_field``)."""

    feature = serializers.RegexField(
        FEATURE_RE.pattern,
        max_length=MAX_FEATURE_LENGTH,
        help_text="Lowercase slug; budgets, reports and metrics group by it.",
    )
    model = serializers.CharField(
        max_length=100, help_text="A model with a price (else `unknown_model`)."
    )
    messages = serializers.ListField(
        child=_MessageSerializer(),
        min_length=1,
        help_text="As in the Messages API; the first message has role `user`.",
    )
    max_tokens = serializers.IntegerField(
        min_value=1, help_text="At most the model's limit (else `invalid_max_tokens`)."
    )
    system = _SystemField(required=False, allow_null=True)
    temperature = serializers.FloatField(required=False, allow_null=True, min_value=0, max_value=1)
    metadata = serializers.DictField(
        required=False, allow_null=True, help_text="Any JSON object, kept with the job."
    )
    concurrency_key = serializers.CharField(
        required=False,
        allow_null=True,
        max_length=MAX_CONCURRENCY_KEY_LENGTH,
        help_text="Jobs sharing a key run one at a time (LLM_CONCURRENCY_KEY_LIMITS).",
    )
    priority = serializers.ChoiceField(
        choices=PRIORITY_CHOICES,
        required=False,
        allow_null=True,
        help_text="high leaves the queue and passes the rate limiter before waiting normal jobs, "
        "low after them (at most LLM_PRIORITY_MAX_WAIT_SECONDS behind newer work); absent: the "
        "feature policy's default_priority, else normal (else `invalid_priority`).",
    )
    tools = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        allow_null=True,
        help_text="Client tools ({name, description, input_schema}) or server tools ({type, "
        "name, ...}); the answer's tool_use blocks come back in output.content.",
    )
    tool_choice = serializers.DictField(
        required=False,
        allow_null=True,
        help_text="{type: auto | any | none} or {type: tool, name}.",
    )
    stop_sequences = serializers.ListField(
        child=serializers.CharField(max_length=256), required=False, allow_null=True, max_length=16
    )
    top_p = serializers.FloatField(required=False, allow_null=True, min_value=0, max_value=1)
    top_k = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=1000)
    deadline = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="ISO 8601; not started by then, the job ends failed `deadline_exceeded` and "
        "is never called, and no retry is scheduled past it. In the past: `invalid_deadline`.",
    )
    deadline_seconds = serializers.FloatField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=MAX_DEADLINE_SECONDS,
        help_text="The deadline as seconds after the submit; not with `deadline`.",
    )
    tags = serializers.ListField(
        child=serializers.SlugField(max_length=MAX_TAG_LENGTH),
        required=False,
        allow_null=True,
        max_length=MAX_TAGS,
        help_text="Slugs (lowercased) to filter (`?tag=`) and cost (`group_by=tag`) jobs by.",
    )
    thinking = serializers.DictField(
        required=False,
        allow_null=True,
        help_text="{type: enabled, budget_tokens: N}, 1024 <= N < max_tokens; billed as output.",
    )
    callback_url = serializers.URLField(
        required=False,
        allow_null=True,
        max_length=MAX_CALLBACK_URL_LENGTH,
        help_text="http(s), no user or password in it: each final state (completed, failed, "
        "cancelled) is POSTed there once, signed (`LLM-Signature`), retried until delivered "
        "(else `invalid_callback_url`).",
    )


SUBMIT_EXAMPLE = OpenApiExample(
    "A classification job",
    value={
        "feature": "email-classify",
        "model": "claude-sonnet-4-6",
        "messages": [{"role": "user", "content": "Classify: please refund my order"}],
        "max_tokens": 256,
    },
    request_only=True,
)


class JobSubmittedSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=LlmJob.Status.choices)
    status_url = serializers.CharField(help_text="Poll here; also in the Location header.")


class JobOutputTextSerializer(serializers.Serializer):
    text = serializers.CharField(
        allow_null=True, help_text="The answer's text (null while the job runs)."
    )
    stop_reason = serializers.CharField(
        allow_null=True, help_text="As the API gave it; `cancelled` for a job cancelled mid-call."
    )
    content = serializers.ListField(
        child=serializers.DictField(),
        help_text="Every content block as the API returned it: text, thinking, tool_use, "
        "server tool results.",
    )
    partial_text = serializers.CharField(
        required=False,
        help_text="A running job (one job's GET only): the text its attempt has streamed so far.",
    )


class JobUsageSerializer(serializers.Serializer):
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField(allow_null=True)
    cache_creation_input_tokens = serializers.IntegerField(allow_null=True)
    cache_read_input_tokens = serializers.IntegerField(allow_null=True)


class JobErrorSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="The failure's reason code, e.g. `rate_limited`.")
    http_status = serializers.IntegerField(allow_null=True)
    message = serializers.CharField()
    severity = serializers.CharField()
    deadline_stopped = serializers.BooleanField(
        required=False,
        help_text="Present (true) only when this failure would have been retried after the "
        "job's deadline, and the job ended here instead.",
    )
