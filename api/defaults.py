"""The OpenAPI schema's settings (drf-spectacular), read by llmops/settings.py as each app's
group of settings is. Nothing here comes from the environment."""

__all__ = ["SPECTACULAR_SETTINGS"]

# Public: the schema describes the API and holds no data; every endpoint still asks for a token.
SPECTACULAR_SETTINGS = {
    "TITLE": "llmops API",
    "DESCRIPTION": (
        "LLM calls as background jobs: submit and poll jobs, batches and pipelines; costs, "
        "budgets and the dead-letter queue. Every error body is {code, message, detail} with a "
        "stable code.\n\nFull reference: `docs/api.md` in the repository (every field, the "
        "Idempotency-Key header, each error code, live events over the WebSocket)."
    ),
    # Sections by importance, not alphabetically (Swagger UI follows this list): jobs first.
    "TAGS": [
        {"name": "jobs", "description": "Submit a model call (202 at once), poll, list, cancel."},
        {"name": "batches", "description": "Up to 10,000 jobs in one request, followed as one."},
        {"name": "pipelines", "description": "Jobs run in turn, each fed the previous output."},
        {"name": "costs", "description": "What the calls cost, from the ledger, grouped one way."},
        {"name": "budgets", "description": "Spending limits per feature or user (staff)."},
        {"name": "failures", "description": "The dead-letter queue: requeue or resolve (staff)."},
        {"name": "me", "description": "Whom the token or session belongs to."},
    ],
    "VERSION": "1",
    "SCHEMA_PATH_PREFIX": r"/api/v1/",  # operations tagged by the segment after it
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],  # a stale token in the browser must not hide the schema
    "COMPONENT_SPLIT_REQUEST": True,  # read-only fields are not inputs
    # Two "status" choice sets: a job's, and a batch's (a pipeline's has the same values).
    "ENUM_NAME_OVERRIDES": {
        "JobStatusEnum": "jobs.models.LlmJob.Status",
        "JobKindEnum": "jobs.models.LlmJob.Kind",
        "JobModeEnum": "jobs.models.LlmJob.Mode",
        "BatchStatusEnum": "batches.models.Batch.Status",
        "AgentRunStatusEnum": "agents.models.AgentRun.Status",
        "AgentStepStatusEnum": "agents.models.AgentStep.Status",
        # jobs/priorities.py: one enum for every priority field (jobs, batches, runs, policies).
        "PriorityEnum": "jobs.priorities.PRIORITY_CHOICES",
    },
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}
