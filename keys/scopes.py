"""The scopes an API key may hold, and what each opens (docs/api.md#scopes).

A view names the scope each of its methods needs (``required_scopes``, checked by
``keys.permissions.HasScope``); a session (the user signed in) holds every scope.
"""

__all__ = ["ADMIN", "ALL_SCOPES", "COSTS_READ", "JOBS_READ", "JOBS_WRITE", "SCOPE_DESCRIPTIONS"]

JOBS_READ = "jobs:read"
JOBS_WRITE = "jobs:write"
COSTS_READ = "costs:read"
ADMIN = "admin"

SCOPE_DESCRIPTIONS = {
    JOBS_READ: "Read jobs, batches, pipelines and agent runs; the live events WebSocket.",
    JOBS_WRITE: "Submit and cancel jobs, batches, pipelines and agent runs; approve tool calls.",
    COSTS_READ: "The cost report (GET /api/v1/costs/).",
    ADMIN: "The staff API (failures, budgets; staff only) and the user's keys (/api/v1/keys/).",
}
"""Every scope, in the order lists show them."""

ALL_SCOPES = tuple(SCOPE_DESCRIPTIONS)
