"""The pipelines API's request bodies as the OpenAPI schema describes them (/api/schema/).

Only a description: ``pipelines/validation.py`` (with the job rules it calls) enforces the body.
Each step is a job body, so its schema is the job's (jobs/api_schema.py).
"""

from drf_spectacular.utils import OpenApiExample
from rest_framework import serializers

from jobs.api_schema import JobSubmitSerializer
from pipelines.models import Pipeline
from pipelines.validation import MAX_NAME_LENGTH

__all__ = ["SUBMIT_EXAMPLE", "PipelineSubmitSerializer", "PipelineSubmittedSerializer"]


class PipelineSubmitSerializer(serializers.Serializer):
    """``POST /api/v1/pipelines/``: no other field is accepted (``unknown_field``)."""

    name = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, max_length=MAX_NAME_LENGTH
    )
    steps = serializers.ListField(
        child=JobSubmitSerializer(),
        min_length=1,
        help_text=(
            "Job bodies, run one after the other; at most PIPELINE_MAX_STEPS (20) "
            "(`too_many_steps`). `{{previous}}` in a step's message text or system is "
            "replaced by the previous step's output text; not in the first step "
            "(`invalid_previous`). One bad step refuses the pipeline: `invalid_steps` lists "
            "every bad index."
        ),
    )
    deadline = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="ISO 8601: every step's job's deadline (a step may then not give its own); "
        "no step starts after it. In the past: `invalid_deadline`.",
    )
    deadline_seconds = serializers.FloatField(
        required=False, allow_null=True, min_value=0, help_text="The deadline, from the submit."
    )
    tags = serializers.ListField(
        child=serializers.SlugField(max_length=64),
        required=False,
        allow_null=True,
        max_length=10,
        help_text="Slugs, on every step's job (before the step's own tags).",
    )


SUBMIT_EXAMPLE = OpenApiExample(
    "Draft, shorten, translate",
    value={
        "name": "refund reply",
        "steps": [
            {
                "feature": "support-draft",
                "model": "claude-sonnet-4-6",
                "max_tokens": 512,
                "messages": [
                    {"role": "user", "content": "Draft a reply to: please refund my order"}
                ],
            },
            {
                "feature": "support-shorten",
                "model": "claude-haiku-4-5",
                "max_tokens": 256,
                "messages": [{"role": "user", "content": "Shorten to two sentences: {{previous}}"}],
            },
            {
                "feature": "support-translate",
                "model": "claude-haiku-4-5",
                "max_tokens": 256,
                "system": "Translate the user's text into French.",
                "messages": [{"role": "user", "content": "{{previous}}"}],
            },
        ],
    },
    request_only=True,
)


class PipelineSubmittedSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=Pipeline.Status.choices)
    status_url = serializers.CharField(help_text="Poll here; also in the Location header.")
