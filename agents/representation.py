"""How an agent run is shown: the body of the agent-run API's answers and of its webhooks, one
shape for both (as jobs/representation.py for jobs)."""

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agents.models import AgentRun, AgentStep
from agents.selectors import agent_run_steps

__all__ = [
    "AgentErrorSerializer",
    "AgentOutputSerializer",
    "AgentRunOutputSerializer",
    "AgentRunRowSerializer",
    "AgentStepSerializer",
    "agent_run_representation",
]


class AgentErrorSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()


class AgentOutputSerializer(serializers.Serializer):
    text = serializers.CharField()
    content = serializers.ListField(child=serializers.DictField())


class AgentStepSerializer(serializers.ModelSerializer):
    job = serializers.UUIDField(source="job_id", allow_null=True, help_text="A turn's job.")
    input = serializers.JSONField(allow_null=True, help_text="A tool call's input.")
    output = serializers.JSONField(
        allow_null=True,
        help_text="What the step added: a turn's content blocks, a tool call's result text.",
    )

    class Meta:
        model = AgentStep
        fields = [
            "index",
            "turn",
            "kind",
            "status",
            "job",
            "name",
            "call_id",
            "input",
            "output",
            "is_error",
            "attempts",
            "started_at",
            "finished_at",
        ]


class AgentRunRowSerializer(serializers.ModelSerializer):
    cost_usd = serializers.DecimalField(max_digits=16, decimal_places=6, coerce_to_string=True)
    tags = serializers.ListField(child=serializers.CharField(), read_only=True)
    error = serializers.SerializerMethodField()

    class Meta:
        model = AgentRun
        fields = [
            "id",
            "status",
            "feature",
            "model",
            "turns",
            "max_turns",
            "tags",
            "deadline",
            "cost_usd",
            "error",
            "created_at",
            "finished_at",
            "pruned_at",
        ]

    @extend_schema_field(AgentErrorSerializer(allow_null=True))
    def get_error(self, run: AgentRun) -> dict[str, str] | None:
        if not run.error_code:
            return None
        return {"code": run.error_code, "message": run.error_message}


class AgentRunOutputSerializer(AgentRunRowSerializer):
    """A run with every step; ``context["steps"]`` holds them (agent_run_steps)."""

    output = serializers.SerializerMethodField()
    pending_approvals = serializers.SerializerMethodField()
    steps = serializers.SerializerMethodField()

    class Meta(AgentRunRowSerializer.Meta):
        fields = [*AgentRunRowSerializer.Meta.fields, "output", "pending_approvals", "steps"]

    @extend_schema_field(AgentOutputSerializer(allow_null=True))
    def get_output(self, run: AgentRun) -> Any:
        return run.output

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_pending_approvals(self, run: AgentRun) -> list[str]:
        """The call ids waiting for a decision."""
        return [
            s.call_id
            for s in self.context["steps"]
            if s.status == AgentStep.Status.WAITING_APPROVAL
        ]

    @extend_schema_field(AgentStepSerializer(many=True))
    def get_steps(self, run: AgentRun) -> list:
        return list(AgentStepSerializer(self.context["steps"], many=True).data)


def agent_run_representation(run: AgentRun) -> dict[str, Any]:
    """The run with every step, as ``GET /api/v1/agent-runs/<id>/`` answers it."""
    return dict(AgentRunOutputSerializer(run, context={"steps": agent_run_steps(run=run)}).data)
