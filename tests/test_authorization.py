"""Who may pass every door: each URL, the WebSocket route and each admin action, for five actors.

One table, one row per door. The actors (tests/authorization_world.py): ``owner`` (a plain user
who owns the jobs, ledger rows and budget of the world), ``another`` (a plain user), anonymous,
``staff`` (``is_staff`` holding only the row's ``has`` permissions) and ``staff+perm`` (the same
plus the row's ``perm``: the permission the door asks for). Outcomes:

- a status code: what the door answers (``login``: a redirect to the sign-in page);
- ``200+`` / ``200-``: 200, and the owner's data is shown / is not (another user's objects are
  invisible: a list leaves them out, a detail answers 404);
- admin actions: ``done`` / ``refused``, read from the database (did the action happen?);
- the WebSocket: ``open+`` / ``open-`` (accepted, and the owner's job event arrives / does not),
  or the close code it is refused with (4401, 4403, 4404); those rows run in
  tests/test_authorization_ws.py, through the real Channels stack.

API doors are called with the actor's API token, every other door with a session. A change or
delete *form* posted to the admin passes the same permission check as its page (Django's
``ModelAdmin``), so the page's row covers both. ``test_every_door_is_in_the_table`` fails when a
URL pattern, WebSocket route or admin action exists that no row covers.
"""

# ruff: noqa: E501  (the table keeps one door per line, so that it reads as a table)

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import transaction

from gateway import anthropic_batch_views, anthropic_views, calls, openai_views
from jobs.ws_urls import websocket_urlpatterns
from tests.authorization_effects import ACTION_EFFECTS, post_action
from tests.authorization_world import (
    ACTORS,
    MARK,
    METRICS_TOKEN,
    World,
    build_world,
    client_for,
    every_admin_action,
    every_route,
    observe,
    route_of,
)
from tests.conftest import job_body

JOB_BODY = job_body()


@dataclass(frozen=True)
class Door:
    kind: str
    """"api" (token), "page" (session), "admin" (session), "action", "ws"."""
    what: str
    """"GET /path/{placeholder}/", "app.Model action_name", or a WebSocket path."""
    perm: str = ""
    """What ``staff+perm`` holds beyond ``has``: permissions, or ``METRICS_TOKEN``."""
    has: str = ""
    """Permissions both staff actors hold (e.g. the view permission an action's page needs)."""
    expected: tuple[object, ...] = ()

    def __str__(self) -> str:
        return f"{self.kind} {self.what}"


def D(kind: str, what: str, perm: str, *expected: object, has: str = "") -> Door:  # noqa: N802
    assert len(expected) == len(ACTORS), what
    return Door(kind, what, perm, has, tuple(expected))


L = "login"
# Every admin model page: anonymous and non-staff users are sent to the admin's sign-in page.
# fmt: off
TABLE: list[Door] = [
    # kind  method path / action / route                      staff+perm holds    owner another anon staff staff+perm
    # --- the jobs API: your own jobs only, staff included -------------------------------------
    D("api", "GET /api/v1/me/", "", 200, 200, 401, 200, 200),
    # --- API keys: your own, whoever you are (staff revoke anyone's in the admin) -------------
    D("api", "GET /api/v1/keys/", "keys.view_apikey", "200+", "200-", 401, "200-", "200-"),
    D("api", "POST /api/v1/keys/", "keys.add_apikey", 201, 201, 401, 201, 201),
    D("api", "POST /api/v1/keys/{api_key}/revoke/", "keys.revoke_apikey", 200, 404, 401, 404, 404),
    D("api", "POST /api/v1/keys/{api_key}/rotate/", "keys.revoke_apikey", 200, 404, 401, 404, 404),
    D("api", "GET /api/v1/jobs/", "jobs.view_llmjob", "200+", "200-", 401, "200-", "200-"),
    D("api", "POST /api/v1/jobs/", "jobs.add_llmjob", 202, 202, 401, 202, 202),
    D("api", "POST /api/v1/webhooks/signing-secret/", "", 201, 201, 401, 201, 201),
    D("api", "GET /api/v1/jobs/{job}/", "jobs.view_llmjob", 200, 404, 401, 404, 404),
    D("api", "POST /api/v1/jobs/{queued_job}/cancel/", "jobs.change_llmjob", 200, 404, 401, 404, 404),
    D("api", "POST /api/v1/embeddings/", "jobs.add_llmjob", 202, 202, 401, 202, 202),
    D("api", "GET /api/v1/embeddings/{embedding}/", "jobs.view_llmjob", 200, 404, 401, 404, 404),
    # --- costs: your own spend; everyone's for staff who may read the ledger ------------------
    D("api", "GET /api/v1/costs/", "ledger.view_costentry", "200+", "200-", 401, "200-", "200+"),
    D("api", "GET /api/v1/costs/?user={owner}", "ledger.view_costentry", "200+", 403, 401, 403, "200+"),
    # --- staff APIs: staff status and the model permission ------------------------------------
    # Budgets: any staff member, as the ops dashboard's budgets panel (tests/ledger/test_budgets_api.py)
    D("api", "GET /api/v1/budgets/", "ledger.view_budget", 403, 403, 401, "200+", "200+"),
    D("api", "GET /api/v1/budgets/{budget}/", "ledger.view_budget", 403, 403, 401, "200+", "200+"),
    D("api", "GET /api/v1/failures/", "dlq.view_failurerecord", 403, 403, 401, 403, "200+"),
    D("api", "POST /api/v1/failures/{failure}/requeue/", "dlq.requeue_failurerecord", 403, 403, 401, 403, 200),
    D("api", "POST /api/v1/failures/{failure}/resolve/", "dlq.resolve_failurerecord", 403, 403, 401, 403, 200),
    # Feature policies: staff with the view (or change) permission read, the change one writes
    D("api", "GET /api/v1/features/", "features.view_featurepolicy", 403, 403, 401, 403, "200+"),
    D("api", "GET /api/v1/features/{feature}/", "features.view_featurepolicy", 403, 403, 401, 403, "200+"),
    D("api", "PUT /api/v1/features/{feature}/", "features.change_featurepolicy", 403, 403, 401, 403, 200),
    # --- batches and pipelines: the owner's, or a staff member's holding the permission --------
    D("api", "GET /api/v1/batches/", "batches.view_batch", "200+", "200-", 401, "200-", "200-"),
    D("api", "POST /api/v1/batches/", "batches.add_batch", 202, 202, 401, 202, 202),
    D("api", "GET /api/v1/batches/{batch}/", "batches.view_batch", 200, 404, 401, 404, 200),
    D("api", "GET /api/v1/batches/{batch}/jobs/", "batches.view_batch", "200+", 404, 401, 404, "200+"),
    D("api", "GET /api/v1/batches/{embedding_batch}/embeddings/", "batches.view_batch", "200+", 404, 401, 404, "200+"),
    D("api", "POST /api/v1/batches/{batch}/cancel/", "batches.cancel_batch", 200, 404, 401, 404, 200),
    D("api", "GET /api/v1/pipelines/", "pipelines.view_pipeline", "200+", "200-", 401, "200-", "200-"),
    D("api", "POST /api/v1/pipelines/", "pipelines.add_pipeline", 202, 202, 401, 202, 202),
    D("api", "GET /api/v1/pipelines/{pipeline}/", "pipelines.view_pipeline", "200+", 404, 401, 404, "200+"),
    D("api", "POST /api/v1/pipelines/{pipeline}/cancel/", "pipelines.cancel_pipeline", 200, 404, 401, 404, 200),
    # --- agent runs: the owner's; staff with the permission see, approve or cancel any ---------
    D("api", "GET /api/v1/agent-runs/", "agents.view_agentrun", "200+", "200-", 401, "200-", "200+"),
    D("api", "POST /api/v1/agent-runs/", "agents.add_agentrun", 202, 202, 401, 202, 202),
    D("api", "GET /api/v1/agent-runs/{agent_run}/", "agents.view_agentrun", "200+", 404, 401, 404, "200+"),
    D("api", "POST /api/v1/agent-runs/{agent_run}/approvals/{agent_call}/", "agents.approve_agentrun", 200, 404, 401, 404, 200),
    D("api", "POST /api/v1/agent-runs/{agent_run}/cancel/", "agents.cancel_agentrun", 200, 404, 401, 404, 200),
    D("api", "GET /api/v1/agent-tools/", "", 200, 200, 401, 200, 200),
    # MCP servers: staff with the view permission read, add and change register (mcp_tools/)
    D("api", "GET /api/v1/mcp-servers/", "mcp_tools.view_mcpserver", 403, 403, 401, 403, "200+"),
    D("api", "POST /api/v1/mcp-servers/", "mcp_tools.add_mcpserver mcp_tools.change_mcpserver", 403, 403, 401, 403, 400, has="mcp_tools.view_mcpserver"),
    # --- the Anthropic door's Message Batches: an API key's own, nobody else's (staff included) -
    D("door", "GET /anthropic/v1/messages/batches", "", 200, 200, 401, 200, 200),
    D("door", "POST /anthropic/v1/messages/batches", "", 200, 200, 401, 200, 200),
    D("door", "GET /anthropic/v1/messages/batches/{message_batch}", "", 200, 404, 401, 404, 404),
    D("door", "DELETE /anthropic/v1/messages/batches/{message_batch}", "", 200, 404, 401, 404, 404),
    D("door", "GET /anthropic/v1/messages/batches/{message_batch}/results", "", "200+", 404, 401, 404, 404),
    D("door", "POST /anthropic/v1/messages/batches/{message_batch}/cancel", "", 200, 404, 401, 404, 404),
    # --- the front doors' calls: any key with the scope; an empty body is let in and refused as
    # invalid (400), a call that could wait for a worker is not made here (tests/gateway) ------
    D("door", "POST /anthropic/v1/messages", "", 400, 400, 401, 400, 400),
    D("door", "POST /anthropic/v1/messages/count_tokens", "", 400, 400, 401, 400, 400),
    D("door", "GET /anthropic/v1/models", "", 200, 200, 401, 200, 200),
    D("door", "GET /anthropic/v1/models/no-such-model", "", 404, 404, 401, 404, 404),
    D("door", "GET /anthropic/v1/no-such-door", "", 404, 404, 404, 404, 404),
    D("door", "POST /openai/v1/chat/completions", "", 400, 400, 401, 400, 400),
    D("door", "POST /openai/v1/embeddings", "", 400, 400, 401, 400, 400),
    D("door", "GET /openai/v1/models", "", 200, 200, 401, 200, 200),
    D("door", "GET /openai/v1/models/no-such-model", "", 404, 404, 401, 404, 404),
    D("door", "GET /openai/v1/no-such-door", "", 404, 404, 404, 404, 404),
    # --- public: the schema, health checks, sign-in ------------------------------------------
    D("page", "GET /api/schema/", "", 200, 200, 200, 200, 200),
    D("page", "GET /api/docs/", "", 200, 200, 200, 200, 200),
    D("page", "GET /healthz", "", 200, 200, 200, 200, 200),
    D("page", "GET /readyz", "", 503, 503, 503, 503, 503),  # no llm worker in this test
    D("page", "GET /login/", "", 200, 200, 200, 200, 200),
    D("page", "GET /", "", 200, 200, 200, 200, 200),  # the home page: links only
    D("page", "GET /api/v1/no-such-thing/", "", 404, 404, 404, 404, 404),  # the JSON 404
    D("page", "GET /live/", "", 200, 200, L, 200, 200),
    D("page", "GET /live/agents/", "", 200, 200, L, 200, 200),
    D("api", "POST /live/fault-jobs/", "", 404, 404, 401, 404, 404),  # the fault picker: DEBUG only
    # --- metrics: the scrape token (or an allowed network), never a session -------------------
    D("page", "GET /metrics", "METRICS_TOKEN", 401, 401, 401, 401, 200),
    D("page", "GET /django-rq/metrics/", "METRICS_TOKEN", 401, 401, 401, 401, 200),
    # --- the ops dashboard: any active staff member (docs/operations.md, "Ops dashboard") -----
    D("admin", "GET /admin/ops/dashboard/", "", L, L, L, 200, 200),
    D("admin", "GET /admin/ops/dashboard/data.json", "", L, L, L, 200, 200),
    # --- the admin site itself ----------------------------------------------------------------
    D("admin", "GET /admin/", "", L, L, L, 200, 200),
    D("admin", "GET /admin/login/", "", 200, 200, 200, 302, 302),
    D("admin", "POST /admin/logout/", "", 302, 302, 302, 200, 200),
    D("admin", "GET /admin/password_change/", "", L, L, L, 200, 200),
    D("admin", "GET /admin/password_change/done/", "", L, L, L, 200, 200),
    D("admin", "GET /admin/jsi18n/", "", L, L, L, 200, 200),
    D("admin", "GET /admin/autocomplete/?app_label=ledger&model_name=budget&field_name=user", "auth.view_user", L, L, L, 403, 200, has="ledger.view_budget"),
    D("admin", "GET /admin/r/{user_ct}/{owner}/", "auth.view_user", L, L, L, 404, 404),
    D("admin", "GET /admin/jobs/", "jobs.view_llmjob", L, L, L, 404, 200),
    D("admin", "GET /admin/no-such-page/", "", L, L, L, 404, 404),
    # --- admin: jobs -------------------------------------------------------------------------
    D("admin", "GET /admin/jobs/llmjob/", "jobs.view_llmjob", L, L, L, 403, "200+"),
    D("admin", "GET /admin/jobs/llmjob/add/", "jobs.add_llmjob", L, L, L, 403, 403),
    D("admin", "GET /admin/jobs/llmjob/{job}/change/", "jobs.view_llmjob", L, L, L, 403, "200+"),
    D("admin", "GET /admin/jobs/llmjob/{job}/delete/", "jobs.delete_llmjob", L, L, L, 403, 403),
    D("admin", "GET /admin/jobs/llmjob/{job}/history/", "jobs.view_llmjob", L, L, L, 403, 200),
    D("admin", "GET /admin/jobs/llmjob/{job}/", "jobs.view_llmjob", L, L, L, 302, 302),
    D("admin", "GET /admin/jobs/providerbreaker/", "jobs.view_providerbreaker", L, L, L, 403, 200),
    D("admin", "GET /admin/jobs/providerbreaker/add/", "jobs.add_providerbreaker", L, L, L, 403, 403),
    D("admin", "GET /admin/jobs/providerbreaker/{breaker}/change/", "jobs.view_providerbreaker", L, L, L, 403, 200),
    D("admin", "GET /admin/jobs/providerbreaker/{breaker}/delete/", "jobs.delete_providerbreaker", L, L, L, 403, 403),
    D("admin", "GET /admin/jobs/providerbreaker/{breaker}/history/", "jobs.view_providerbreaker", L, L, L, 403, 200),
    D("admin", "GET /admin/jobs/providerbreaker/{breaker}/", "jobs.view_providerbreaker", L, L, L, 302, 302),
    # --- admin: ledger -----------------------------------------------------------------------
    # --- admin: deferred work (records of what happened: read-only) ---------------------------
    D("admin", "GET /admin/deferred/providerbatch/", "deferred.view_providerbatch", L, L, L, 403, "200+"),
    D("admin", "GET /admin/deferred/providerbatch/add/", "deferred.add_providerbatch", L, L, L, 403, 403),
    D("admin", "GET /admin/deferred/providerbatch/{provider_batch}/change/", "deferred.view_providerbatch", L, L, L, 403, "200+"),
    D("admin", "GET /admin/deferred/providerbatch/{provider_batch}/delete/", "deferred.delete_providerbatch", L, L, L, 403, 403),
    D("admin", "GET /admin/deferred/providerbatch/{provider_batch}/history/", "deferred.view_providerbatch", L, L, L, 403, 200),
    D("admin", "GET /admin/deferred/providerbatch/{provider_batch}/", "deferred.view_providerbatch", L, L, L, 302, 302),
    D("admin", "GET /admin/deferred/providerbatchitem/", "deferred.view_providerbatchitem", L, L, L, 403, "200+"),
    D("admin", "GET /admin/deferred/providerbatchitem/add/", "deferred.add_providerbatchitem", L, L, L, 403, 403),
    D("admin", "GET /admin/deferred/providerbatchitem/{provider_batch_item}/change/", "deferred.view_providerbatchitem", L, L, L, 403, "200+"),
    D("admin", "GET /admin/deferred/providerbatchitem/{provider_batch_item}/delete/", "deferred.delete_providerbatchitem", L, L, L, 403, 403),
    D("admin", "GET /admin/deferred/providerbatchitem/{provider_batch_item}/history/", "deferred.view_providerbatchitem", L, L, L, 403, 200),
    D("admin", "GET /admin/deferred/providerbatchitem/{provider_batch_item}/", "deferred.view_providerbatchitem", L, L, L, 302, 302),
    D("admin", "GET /admin/webhooks/webhookdelivery/", "webhooks.view_webhookdelivery", L, L, L, 403, "200+"),
    D("admin", "GET /admin/webhooks/webhookdelivery/add/", "webhooks.add_webhookdelivery", L, L, L, 403, 403),
    D("admin", "GET /admin/webhooks/webhookdelivery/{webhook_delivery}/change/", "webhooks.view_webhookdelivery", L, L, L, 403, "200+"),
    D("admin", "GET /admin/webhooks/webhookdelivery/{webhook_delivery}/delete/", "webhooks.delete_webhookdelivery", L, L, L, 403, 403),
    D("admin", "GET /admin/webhooks/webhookdelivery/{webhook_delivery}/history/", "webhooks.view_webhookdelivery", L, L, L, 403, 200),
    D("admin", "GET /admin/webhooks/webhookdelivery/{webhook_delivery}/", "webhooks.view_webhookdelivery", L, L, L, 302, 302),
    D("admin", "GET /admin/ledger/costentry/", "ledger.view_costentry", L, L, L, 403, "200+"),
    D("admin", "GET /admin/ledger/costentry/add/", "ledger.add_costentry", L, L, L, 403, 403),
    D("admin", "GET /admin/ledger/costentry/{entry}/change/", "ledger.view_costentry", L, L, L, 403, "200+"),
    D("admin", "GET /admin/ledger/costentry/{entry}/delete/", "ledger.delete_costentry", L, L, L, 403, 403),
    D("admin", "GET /admin/ledger/costentry/{entry}/history/", "ledger.view_costentry", L, L, L, 403, 200),
    D("admin", "GET /admin/ledger/costentry/{entry}/", "ledger.view_costentry", L, L, L, 302, 302),
    D("admin", "GET /admin/ledger/costentry/report/", "ledger.view_costentry", L, L, L, 403, "200+"),
    D("admin", "GET /admin/ledger/costentry/report/csv/", "ledger.view_costentry", L, L, L, 403, "200+"),
    D("admin", "GET /admin/ledger/budget/", "ledger.view_budget", L, L, L, 403, "200+"),
    D("admin", "GET /admin/ledger/budget/add/", "ledger.add_budget", L, L, L, 403, 200),
    D("admin", "GET /admin/ledger/budget/{budget}/change/", "ledger.view_budget", L, L, L, 403, "200+"),
    D("admin", "GET /admin/ledger/budget/{budget}/delete/", "ledger.delete_budget", L, L, L, 403, 200),
    D("admin", "GET /admin/ledger/budget/{budget}/history/", "ledger.view_budget", L, L, L, 403, 200),
    D("admin", "GET /admin/ledger/budget/{budget}/", "ledger.view_budget", L, L, L, 302, 302),
    D("admin", "GET /admin/ledger/modelprice/", "ledger.view_modelprice", L, L, L, 403, 200),
    D("admin", "GET /admin/ledger/modelprice/add/", "ledger.add_modelprice", L, L, L, 403, 200),
    D("admin", "GET /admin/ledger/modelprice/{price}/change/", "ledger.view_modelprice", L, L, L, 403, 200),
    D("admin", "GET /admin/ledger/modelprice/{price}/delete/", "ledger.delete_modelprice", L, L, L, 403, 200),
    D("admin", "GET /admin/ledger/modelprice/{price}/history/", "ledger.view_modelprice", L, L, L, 403, 200),
    D("admin", "GET /admin/ledger/modelprice/{price}/", "ledger.view_modelprice", L, L, L, 302, 302),
    # --- admin: alerts and the DLQ -----------------------------------------------------------
    D("admin", "GET /admin/features/featurepolicy/", "features.view_featurepolicy", L, L, L, 403, "200+"),
    D("admin", "GET /admin/features/featurepolicy/add/", "features.add_featurepolicy", L, L, L, 403, 200),
    D("admin", "GET /admin/features/featurepolicy/{feature_policy}/change/", "features.view_featurepolicy", L, L, L, 403, "200+"),
    D("admin", "GET /admin/features/featurepolicy/{feature_policy}/delete/", "features.delete_featurepolicy", L, L, L, 403, 200),
    D("admin", "GET /admin/features/featurepolicy/{feature_policy}/history/", "features.view_featurepolicy", L, L, L, 403, 200),
    D("admin", "GET /admin/features/featurepolicy/{feature_policy}/", "features.view_featurepolicy", L, L, L, 302, 302),
    D("admin", "GET /admin/mcp_tools/mcpserver/", "mcp_tools.view_mcpserver", L, L, L, 403, "200+"),
    D("admin", "GET /admin/mcp_tools/mcpserver/add/", "mcp_tools.add_mcpserver", L, L, L, 403, 200),
    D("admin", "GET /admin/mcp_tools/mcpserver/{mcp_server}/change/", "mcp_tools.view_mcpserver", L, L, L, 403, "200+"),
    D("admin", "GET /admin/mcp_tools/mcpserver/{mcp_server}/delete/", "mcp_tools.delete_mcpserver", L, L, L, 403, 200),
    D("admin", "GET /admin/mcp_tools/mcpserver/{mcp_server}/history/", "mcp_tools.view_mcpserver", L, L, L, 403, 200),
    D("admin", "GET /admin/mcp_tools/mcpserver/{mcp_server}/", "mcp_tools.view_mcpserver", L, L, L, 302, 302),
    D("admin", "GET /admin/dlq/failurerecord/", "dlq.view_failurerecord", L, L, L, 403, "200+"),
    D("admin", "GET /admin/dlq/failurerecord/add/", "dlq.add_failurerecord", L, L, L, 403, 403),
    D("admin", "GET /admin/dlq/failurerecord/{failure}/change/", "dlq.view_failurerecord", L, L, L, 403, "200+"),
    D("admin", "GET /admin/dlq/failurerecord/{failure}/delete/", "dlq.delete_failurerecord", L, L, L, 403, 403),
    D("admin", "GET /admin/dlq/failurerecord/{failure}/history/", "dlq.view_failurerecord", L, L, L, 403, 200),
    D("admin", "GET /admin/dlq/failurerecord/{failure}/", "dlq.view_failurerecord", L, L, L, 302, 302),
    D("admin", "GET /admin/dlq/failurerecord/requeue-matching/", "dlq.requeue_matching_failurerecord", L, L, L, 403, "200+", has="dlq.view_failurerecord"),
    D("admin", "GET /admin/dlq/bulkrequeue/", "dlq.view_bulkrequeue", L, L, L, 403, "200+"),
    D("admin", "GET /admin/dlq/bulkrequeue/add/", "dlq.add_bulkrequeue", L, L, L, 403, 403),
    D("admin", "GET /admin/dlq/bulkrequeue/{bulk}/change/", "dlq.view_bulkrequeue", L, L, L, 403, "200+"),
    D("admin", "GET /admin/dlq/bulkrequeue/{bulk}/delete/", "dlq.delete_bulkrequeue", L, L, L, 403, 403),
    D("admin", "GET /admin/dlq/bulkrequeue/{bulk}/history/", "dlq.view_bulkrequeue", L, L, L, 403, 200),
    D("admin", "GET /admin/dlq/bulkrequeue/{bulk}/", "dlq.view_bulkrequeue", L, L, L, 302, 302),
    D("admin", "GET /admin/alerts/alert/", "alerts.view_alert", L, L, L, 403, "200+"),
    D("admin", "GET /admin/alerts/alert/add/", "alerts.add_alert", L, L, L, 403, 403),
    D("admin", "GET /admin/alerts/alert/{alert}/change/", "alerts.view_alert", L, L, L, 403, "200+"),
    D("admin", "GET /admin/alerts/alert/{alert}/delete/", "alerts.delete_alert", L, L, L, 403, 403),
    D("admin", "GET /admin/alerts/alert/{alert}/history/", "alerts.view_alert", L, L, L, 403, 200),
    D("admin", "GET /admin/alerts/alert/{alert}/", "alerts.view_alert", L, L, L, 302, 302),
    D("admin", "GET /admin/alerts/alertroute/", "alerts.view_alertroute", L, L, L, 403, "200+"),
    D("admin", "GET /admin/alerts/alertroute/add/", "alerts.add_alertroute", L, L, L, 403, 200),
    D("admin", "GET /admin/alerts/alertroute/{route}/change/", "alerts.view_alertroute", L, L, L, 403, "200+"),
    D("admin", "GET /admin/alerts/alertroute/{route}/delete/", "alerts.delete_alertroute", L, L, L, 403, 200),
    D("admin", "GET /admin/alerts/alertroute/{route}/history/", "alerts.view_alertroute", L, L, L, 403, 200),
    D("admin", "GET /admin/alerts/alertroute/{route}/", "alerts.view_alertroute", L, L, L, 302, 302),
    D("admin", "GET /admin/alerts/loopheartbeat/", "alerts.view_loopheartbeat", L, L, L, 403, "200+"),
    D("admin", "GET /admin/alerts/loopheartbeat/add/", "alerts.add_loopheartbeat", L, L, L, 403, 403),
    D("admin", "GET /admin/alerts/loopheartbeat/{heartbeat}/change/", "alerts.view_loopheartbeat", L, L, L, 403, "200+"),
    D("admin", "GET /admin/alerts/loopheartbeat/{heartbeat}/delete/", "alerts.delete_loopheartbeat", L, L, L, 403, 403),
    D("admin", "GET /admin/alerts/loopheartbeat/{heartbeat}/history/", "alerts.view_loopheartbeat", L, L, L, 403, 200),
    D("admin", "GET /admin/alerts/loopheartbeat/{heartbeat}/", "alerts.view_loopheartbeat", L, L, L, 302, 302),
    # --- admin: batches and pipelines ---------------------------------------------------------
    D("admin", "GET /admin/batches/batch/", "batches.view_batch", L, L, L, 403, "200+"),
    D("admin", "GET /admin/batches/batch/add/", "batches.add_batch", L, L, L, 403, 403),
    D("admin", "GET /admin/batches/batch/{batch}/change/", "batches.view_batch", L, L, L, 403, "200+"),
    D("admin", "GET /admin/batches/batch/{batch}/delete/", "batches.delete_batch", L, L, L, 403, 403),
    D("admin", "GET /admin/batches/batch/{batch}/history/", "batches.view_batch", L, L, L, 403, 200),
    D("admin", "GET /admin/batches/batch/{batch}/", "batches.view_batch", L, L, L, 302, 302),
    D("admin", "GET /admin/batches/batchitem/", "batches.view_batchitem", L, L, L, 403, "200+"),
    D("admin", "GET /admin/batches/batchitem/add/", "batches.add_batchitem", L, L, L, 403, 403),
    D("admin", "GET /admin/batches/batchitem/{batch_item}/change/", "batches.view_batchitem", L, L, L, 403, "200+"),
    D("admin", "GET /admin/batches/batchitem/{batch_item}/delete/", "batches.delete_batchitem", L, L, L, 403, 403),
    D("admin", "GET /admin/batches/batchitem/{batch_item}/history/", "batches.view_batchitem", L, L, L, 403, 200),
    D("admin", "GET /admin/batches/batchitem/{batch_item}/", "batches.view_batchitem", L, L, L, 302, 302),
    D("admin", "GET /admin/pipelines/pipeline/", "pipelines.view_pipeline", L, L, L, 403, "200+"),
    D("admin", "GET /admin/pipelines/pipeline/add/", "pipelines.add_pipeline", L, L, L, 403, 403),
    D("admin", "GET /admin/pipelines/pipeline/{pipeline}/change/", "pipelines.view_pipeline", L, L, L, 403, "200+"),
    D("admin", "GET /admin/pipelines/pipeline/{pipeline}/delete/", "pipelines.delete_pipeline", L, L, L, 403, 403),
    D("admin", "GET /admin/pipelines/pipeline/{pipeline}/history/", "pipelines.view_pipeline", L, L, L, 403, 200),
    D("admin", "GET /admin/pipelines/pipeline/{pipeline}/", "pipelines.view_pipeline", L, L, L, 302, 302),
    # --- admin: agent runs (read-only; approve, reject and cancel are actions) ---------------
    D("admin", "GET /admin/agents/agentrun/", "agents.view_agentrun", L, L, L, 403, "200+"),
    D("admin", "GET /admin/agents/agentrun/add/", "agents.add_agentrun", L, L, L, 403, 403),
    D("admin", "GET /admin/agents/agentrun/{agent_run}/change/", "agents.view_agentrun", L, L, L, 403, "200+"),
    D("admin", "GET /admin/agents/agentrun/{agent_run}/delete/", "agents.delete_agentrun", L, L, L, 403, 403),
    D("admin", "GET /admin/agents/agentrun/{agent_run}/history/", "agents.view_agentrun", L, L, L, 403, 200),
    D("admin", "GET /admin/agents/agentrun/{agent_run}/", "agents.view_agentrun", L, L, L, 302, 302),
    D("admin", "GET /admin/agents/demoemail/", "agents.view_demoemail", L, L, L, 403, "200+"),
    D("admin", "GET /admin/agents/demoemail/add/", "agents.add_demoemail", L, L, L, 403, 403),
    D("admin", "GET /admin/agents/demoemail/{demo_email}/change/", "agents.view_demoemail", L, L, L, 403, "200+"),
    D("admin", "GET /admin/agents/demoemail/{demo_email}/delete/", "agents.delete_demoemail", L, L, L, 403, 403),
    D("admin", "GET /admin/agents/demoemail/{demo_email}/history/", "agents.view_demoemail", L, L, L, 403, 200),
    D("admin", "GET /admin/agents/demoemail/{demo_email}/", "agents.view_demoemail", L, L, L, 302, 302),
    # --- admin: rate limits ------------------------------------------------------------------
    D("admin", "GET /admin/providers/provider/", "providers.view_provider", L, L, L, 403, "200+"),
    D("admin", "GET /admin/providers/provider/add/", "providers.add_provider", L, L, L, 403, 200),
    D("admin", "GET /admin/providers/provider/{provider}/change/", "providers.view_provider", L, L, L, 403, "200+"),
    D("admin", "GET /admin/providers/provider/{provider}/delete/", "providers.delete_provider", L, L, L, 403, 200),
    D("admin", "GET /admin/providers/provider/{provider}/history/", "providers.view_provider", L, L, L, 403, 200),
    D("admin", "GET /admin/providers/provider/{provider}/", "providers.view_provider", L, L, L, 302, 302),
    D("admin", "GET /admin/ratelimits/ratelimit/", "ratelimits.view_ratelimit", L, L, L, 403, "200+"),
    D("admin", "GET /admin/ratelimits/ratelimit/add/", "ratelimits.add_ratelimit", L, L, L, 403, 200),
    D("admin", "GET /admin/ratelimits/ratelimit/{rate_limit}/change/", "ratelimits.view_ratelimit", L, L, L, 403, "200+"),
    D("admin", "GET /admin/ratelimits/ratelimit/{rate_limit}/delete/", "ratelimits.delete_ratelimit", L, L, L, 403, 200),
    D("admin", "GET /admin/ratelimits/ratelimit/{rate_limit}/history/", "ratelimits.view_ratelimit", L, L, L, 403, 200),
    D("admin", "GET /admin/ratelimits/ratelimit/{rate_limit}/", "ratelimits.view_ratelimit", L, L, L, 302, 302),
    # --- admin: users, groups, API tokens ----------------------------------------------------
    D("admin", "GET /admin/auth/user/", "auth.view_user", L, L, L, 403, 200),
    D("admin", "GET /admin/auth/user/add/", "auth.add_user auth.change_user", L, L, L, 403, 200),
    D("admin", "GET /admin/auth/user/{user}/change/", "auth.view_user", L, L, L, 403, 200),
    D("admin", "GET /admin/auth/user/{user}/delete/", "auth.delete_user", L, L, L, 403, 200),
    D("admin", "GET /admin/auth/user/{user}/history/", "auth.view_user", L, L, L, 403, 200),
    D("admin", "GET /admin/auth/user/{user}/", "auth.view_user", L, L, L, 302, 302),
    D("admin", "GET /admin/auth/user/{user}/password/", "auth.change_user", L, L, L, 403, 200),
    D("admin", "GET /admin/auth/group/", "auth.view_group", L, L, L, 403, "200+"),
    D("admin", "GET /admin/auth/group/add/", "auth.add_group", L, L, L, 403, 200),
    D("admin", "GET /admin/auth/group/{group}/change/", "auth.view_group", L, L, L, 403, "200+"),
    D("admin", "GET /admin/auth/group/{group}/delete/", "auth.delete_group", L, L, L, 403, 200),
    D("admin", "GET /admin/auth/group/{group}/history/", "auth.view_group", L, L, L, 403, 200),
    D("admin", "GET /admin/auth/group/{group}/", "auth.view_group", L, L, L, 302, 302),
    D("admin", "GET /admin/keys/apikey/", "keys.view_apikey", L, L, L, 403, "200+"),
    D("admin", "GET /admin/keys/apikey/add/", "keys.add_apikey", L, L, L, 403, 200),
    D("admin", "GET /admin/keys/apikey/{api_key}/change/", "keys.view_apikey", L, L, L, 403, "200+"),
    D("admin", "GET /admin/keys/apikey/{api_key}/delete/", "keys.delete_apikey", L, L, L, 403, 403),
    D("admin", "GET /admin/keys/apikey/{api_key}/history/", "keys.view_apikey", L, L, L, 403, 200),
    D("admin", "GET /admin/keys/apikey/{api_key}/", "keys.view_apikey", L, L, L, 302, 302),
    # --- admin: the audit trail (a record of what happened: read-only) -------------------------
    D("admin", "GET /admin/audit/auditrecord/", "audit.view_auditrecord", L, L, L, 403, 200),
    D("admin", "GET /admin/audit/auditrecord/add/", "audit.add_auditrecord", L, L, L, 403, 403),
    D("admin", "GET /admin/audit/auditrecord/{audit_record}/change/", "audit.view_auditrecord", L, L, L, 403, 200),
    D("admin", "GET /admin/audit/auditrecord/{audit_record}/delete/", "audit.delete_auditrecord", L, L, L, 403, 403),
    D("admin", "GET /admin/audit/auditrecord/{audit_record}/history/", "audit.view_auditrecord", L, L, L, 403, 200),
    D("admin", "GET /admin/audit/auditrecord/{audit_record}/", "audit.view_auditrecord", L, L, L, 302, 302),
    # --- django-rq's dashboard, at /django-rq/ and in the admin ({rq}: both): its permission ---
    D("admin", "GET {rq}", "django_rq.admin", L, L, L, 403, 200),
    D("admin", "GET {rq}stats.json", "django_rq.admin", 401, 401, 401, 403, 200),
    D("admin", "GET {rq}stats.json/wrongtoken/", "django_rq.admin", 401, 401, 401, 403, 200),
    D("page", "GET {rq}metrics/", "METRICS_TOKEN", 401, 401, 401, 401, 200),
    D("admin", "GET {rq}queues/{queue}/", "django_rq.admin", L, L, L, 403, 200),
    D("admin", "GET {rq}queues/{queue}/details/", "django_rq.admin", L, L, L, 403, 200),
    D("admin", "GET {rq}queues/{queue}/finished/", "django_rq.admin", L, L, L, 403, 200),
    D("admin", "GET {rq}queues/{queue}/failed/", "django_rq.admin", L, L, L, 403, 200),
    D("admin", "GET {rq}queues/{queue}/failed/clear/", "django_rq.admin", L, L, L, 403, 200),
    D("admin", "GET {rq}queues/{queue}/scheduled/", "django_rq.admin", L, L, L, 403, 200),
    D("admin", "GET {rq}queues/{queue}/started/", "django_rq.admin", L, L, L, 403, 200),
    D("admin", "GET {rq}queues/{queue}/deferred/", "django_rq.admin", L, L, L, 403, 200),
    D("admin", "GET {rq}queues/{queue}/empty/", "django_rq.admin", L, L, L, 403, 200),
    D("admin", "POST {rq}queues/{queue}/empty/", "django_rq.admin", L, L, L, 403, 302),
    D("admin", "GET {rq}queues/{queue}/requeue-all/", "django_rq.admin", L, L, L, 403, 200),
    D("admin", "GET {rq}queues/{queue}/{rq_job}/", "django_rq.admin", L, L, L, 403, 200),
    D("admin", "GET {rq}queues/{queue}/{rq_job}/results/no-such-result/", "django_rq.admin", L, L, L, 403, 404),
    D("admin", "GET {rq}queues/{queue}/{rq_job}/delete/", "django_rq.admin", L, L, L, 403, 200),
    D("admin", "GET {rq}queues/{queue}/{rq_job}/requeue/", "django_rq.admin", L, L, L, 403, 200),
    D("admin", "GET {rq}queues/{queue}/{rq_job}/enqueue/", "django_rq.admin", L, L, L, 403, 200),
    D("admin", "POST {rq}queues/{queue}/{rq_job}/stop/", "django_rq.admin", L, L, L, 403, 302),
    D("admin", "POST {rq}queues/confirm-action/{queue}/", "django_rq.admin", L, L, L, 403, 302),
    D("admin", "POST {rq}queues/actions/{queue}/", "django_rq.admin", L, L, L, 403, 302),
    D("admin", "GET {rq}workers/{queue}/", "django_rq.admin", L, L, L, 403, 200),
    D("admin", "GET {rq}workers/{queue}/rq:worker:{rq_worker}/", "django_rq.admin", L, L, L, 403, 200),
    D("admin", "GET {rq}cron-schedulers/0/no-such-scheduler/", "django_rq.admin", L, L, L, 403, 404),
    D("admin", "GET {rq}cron-schedulers/0/no-such-scheduler/jobs/none/", "django_rq.admin", L, L, L, 403, 404),
    # --- admin actions (each read back from the database) ------------------------------------
    D("action", "dlq.FailureRecord requeue", "dlq.requeue_failurerecord", "refused", "refused", "refused", "refused", "done", has="dlq.view_failurerecord"),
    D("action", "dlq.FailureRecord requeue_with_model", "dlq.requeue_other_model_failurerecord", "refused", "refused", "refused", "refused", "done", has="dlq.view_failurerecord"),
    D("action", "dlq.FailureRecord resolve", "dlq.resolve_failurerecord", "refused", "refused", "refused", "refused", "done", has="dlq.view_failurerecord"),
    D("action", "dlq.FailureRecord ignore", "dlq.ignore_failurerecord", "refused", "refused", "refused", "refused", "done", has="dlq.view_failurerecord"),
    D("action", "dlq.FailureRecord requeue_matching", "dlq.requeue_matching_failurerecord", "refused", "refused", "refused", "refused", "done", has="dlq.view_failurerecord"),
    D("action", "jobs.LlmJob cancel_jobs", "jobs.change_llmjob", "refused", "refused", "refused", "refused", "done", has="jobs.view_llmjob"),
    D("action", "features.FeaturePolicy pause_features", "features.change_featurepolicy", "refused", "refused", "refused", "refused", "done", has="features.view_featurepolicy"),
    D("action", "features.FeaturePolicy resume_features", "features.change_featurepolicy", "refused", "refused", "refused", "refused", "done", has="features.view_featurepolicy"),
    D("action", "providers.Provider pause_providers", "providers.change_provider", "refused", "refused", "refused", "refused", "done", has="providers.view_provider"),
    D("action", "providers.Provider resume_providers", "providers.change_provider", "refused", "refused", "refused", "refused", "done", has="providers.view_provider"),
    D("action", "jobs.ProviderBreaker close_breaker", "jobs.close_providerbreaker", "refused", "refused", "refused", "refused", "done", has="jobs.view_providerbreaker"),
    D("action", "batches.Batch cancel_batches", "batches.cancel_batch", "refused", "refused", "refused", "refused", "done", has="batches.view_batch"),
    D("action", "webhooks.WebhookDelivery deliver_again", "webhooks.redeliver_webhookdelivery", "refused", "refused", "refused", "refused", "done", has="webhooks.view_webhookdelivery"),
    D("action", "webhooks.WebhookDelivery delete_selected", "webhooks.delete_webhookdelivery", "refused", "refused", "refused", "refused", "refused", has="webhooks.view_webhookdelivery"),
    D("action", "pipelines.Pipeline cancel_pipelines", "pipelines.cancel_pipeline", "refused", "refused", "refused", "refused", "done", has="pipelines.view_pipeline"),
    D("action", "agents.AgentRun approve_calls", "agents.approve_agentrun", "refused", "refused", "refused", "refused", "done", has="agents.view_agentrun"),
    D("action", "agents.AgentRun reject_calls", "agents.approve_agentrun", "refused", "refused", "refused", "refused", "done", has="agents.view_agentrun"),
    D("action", "agents.AgentRun cancel_runs", "agents.cancel_agentrun", "refused", "refused", "refused", "refused", "done", has="agents.view_agentrun"),
    D("action", "agents.AgentRun delete_selected", "agents.delete_agentrun", "refused", "refused", "refused", "refused", "refused", has="agents.view_agentrun"),
    D("action", "agents.DemoEmail delete_selected", "agents.delete_demoemail", "refused", "refused", "refused", "refused", "refused", has="agents.view_demoemail"),
    D("action", "batches.Batch delete_selected", "batches.delete_batch", "refused", "refused", "refused", "refused", "refused", has="batches.view_batch"),
    D("action", "batches.BatchItem delete_selected", "batches.delete_batchitem", "refused", "refused", "refused", "refused", "refused", has="batches.view_batchitem"),
    D("action", "pipelines.Pipeline delete_selected", "pipelines.delete_pipeline", "refused", "refused", "refused", "refused", "refused", has="pipelines.view_pipeline"),
    # delete_selected: offered only where the admin allows deleting; never for records of what happened.
    D("action", "jobs.LlmJob delete_selected", "jobs.delete_llmjob", "refused", "refused", "refused", "refused", "refused", has="jobs.view_llmjob"),
    D("action", "jobs.ProviderBreaker delete_selected", "jobs.delete_providerbreaker", "refused", "refused", "refused", "refused", "refused", has="jobs.view_providerbreaker"),
    D("action", "ledger.CostEntry delete_selected", "ledger.delete_costentry", "refused", "refused", "refused", "refused", "refused", has="ledger.view_costentry"),
    D("action", "deferred.ProviderBatch delete_selected", "deferred.delete_providerbatch", "refused", "refused", "refused", "refused", "refused", has="deferred.view_providerbatch"),
    D("action", "deferred.ProviderBatchItem delete_selected", "deferred.delete_providerbatchitem", "refused", "refused", "refused", "refused", "refused", has="deferred.view_providerbatchitem"),
    D("action", "ledger.Budget delete_selected", "ledger.delete_budget", "refused", "refused", "refused", "refused", "done", has="ledger.view_budget"),
    D("action", "features.FeaturePolicy delete_selected", "features.delete_featurepolicy", "refused", "refused", "refused", "refused", "done", has="features.view_featurepolicy"),
    D("action", "mcp_tools.MCPServer delete_selected", "mcp_tools.delete_mcpserver", "refused", "refused", "refused", "refused", "done", has="mcp_tools.view_mcpserver"),
    D("action", "ledger.ModelPrice delete_selected", "ledger.delete_modelprice", "refused", "refused", "refused", "refused", "done", has="ledger.view_modelprice"),
    D("action", "dlq.FailureRecord delete_selected", "dlq.delete_failurerecord", "refused", "refused", "refused", "refused", "refused", has="dlq.view_failurerecord"),
    D("action", "dlq.BulkRequeue delete_selected", "dlq.delete_bulkrequeue", "refused", "refused", "refused", "refused", "refused", has="dlq.view_bulkrequeue"),
    D("action", "alerts.Alert delete_selected", "alerts.delete_alert", "refused", "refused", "refused", "refused", "refused", has="alerts.view_alert"),
    D("action", "alerts.AlertRoute delete_selected", "alerts.delete_alertroute", "refused", "refused", "refused", "refused", "done", has="alerts.view_alertroute"),
    D("action", "alerts.LoopHeartbeat delete_selected", "alerts.delete_loopheartbeat", "refused", "refused", "refused", "refused", "refused", has="alerts.view_loopheartbeat"),
    D("action", "providers.Provider delete_selected", "providers.delete_provider", "refused", "refused", "refused", "refused", "done", has="providers.view_provider"),
    D("action", "ratelimits.RateLimit delete_selected", "ratelimits.delete_ratelimit", "refused", "refused", "refused", "refused", "done", has="ratelimits.view_ratelimit"),
    D("action", "keys.ApiKey revoke_keys", "keys.revoke_apikey", "refused", "refused", "refused", "refused", "done", has="keys.view_apikey"),
    D("action", "audit.AuditRecord delete_selected", "audit.delete_auditrecord", "refused", "refused", "refused", "refused", "refused", has="audit.view_auditrecord"),
    D("action", "keys.ApiKey delete_selected", "keys.delete_apikey", "refused", "refused", "refused", "refused", "refused", has="keys.view_apikey"),
    D("action", "auth.User delete_selected", "auth.delete_user", "refused", "refused", "refused", "refused", "done", has="auth.view_user"),
    D("action", "auth.Group delete_selected", "auth.delete_group", "refused", "refused", "refused", "refused", "done", has="auth.view_group"),
    # --- the WebSocket of live job events ----------------------------------------------------
    D("ws", "/ws/jobs/", "jobs.view_llmjob", "open+", "open-", 4401, "open-", "open-"),
    D("ws", "/ws/jobs/?job={job}", "jobs.view_llmjob", "open+", 4404, 4401, 4404, 4404),
    D("ws", "/ws/jobs/?job=not-a-uuid", "jobs.view_llmjob", 4404, 4404, 4401, 4404, 4404),
    D("ws", "/ws/jobs/?all=1", "jobs.view_llmjob", 4403, 4403, 4401, 4403, "open+"),
]
# fmt: on


RQ_MOUNTS = ("/django-rq/", "/admin/django_rq/dashboard/")
"""django-rq's dashboard is served twice; a row with ``{rq}`` stands for both."""
TABLE = [
    Door(door.kind, door.what.replace("{rq}", mount), door.perm, door.has, door.expected)
    for door in TABLE
    for mount in (RQ_MOUNTS if "{rq}" in door.what else ("",))
]


HTTP_KINDS = ("api", "page", "admin", "door")
"""``door``: a front door's route, called with the API token as any API door."""
ACTION_PAGES = {"dlq.FailureRecord requeue_matching"}
"""Rows of the action kind that are not in an action menu: "requeue all matching" is posted to
its own admin page (which has its row too)."""


def rows_of(*kinds: str) -> list[Any]:
    return [pytest.param(door, id=str(door)) for door in TABLE if door.kind in kinds]


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split()) if text else ()


def grant(world: World, door: Door) -> World:
    perm = _names(door.perm) if door.perm != "METRICS_TOKEN" else ()
    world.grant(has=_names(door.has), perm=perm)
    return world


@pytest.fixture(scope="module")
def shared_world(django_db_setup: None, django_db_blocker: Any) -> Iterator[World]:
    """One world for every HTTP row and action, made once in a transaction that is rolled back
    at the end; each test runs in a savepoint inside it (pytest-django's ``db``), so what a row
    changes is undone before the next."""
    with django_db_blocker.unblock(), transaction.atomic():
        yield build_world()
        transaction.set_rollback(True)


@pytest.fixture
def world(shared_world: World, db: None) -> World:
    shared_world.fill_redis()
    return shared_world


POST_BODIES = {
    "/api/v1/jobs/": JOB_BODY,
    "/api/v1/batches/": {
        "feature": "f",
        "model": JOB_BODY["model"],
        "items": [{"messages": JOB_BODY["messages"], "max_tokens": 64}],
    },
    "/api/v1/pipelines/": {"steps": [JOB_BODY]},
    "/api/v1/embeddings/": {"feature": "f", "model": f"{MARK}-embed", "input": ["hi"]},
    "/api/v1/agent-runs/": {k: JOB_BODY[k] for k in ("feature", "model", "messages", "max_tokens")},
    "/api/v1/agent-runs/{agent_run}/approvals/{agent_call}/": {"approve": True},
    "/api/v1/keys/": {"name": "ops", "scopes": ["admin"]},  # no more than the admin-only key
    "/anthropic/v1/messages/batches": {
        "requests": [
            {
                "custom_id": "one",
                "params": {k: JOB_BODY[k] for k in ("model", "messages", "max_tokens")},
            }
        ]
    },
    "/api/v1/features/{feature}/": {"fallback_models": ["claude-haiku-4-5"]},
}
"""What a row's POST sends (a valid submit, so that 202 means "let in and accepted")."""


# --- HTTP doors and admin actions: one world for the module (see shared_world) ---------------


@pytest.mark.parametrize("door", rows_of(*HTTP_KINDS))
def test_http_door(
    door: Door, world: World, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    if door.kind == "door":
        # The world is a transaction never committed, which the doors' own threads (each with
        # its connection) cannot see: their steps run on the test's thread instead.
        for module in (anthropic_batch_views, anthropic_views, calls, openai_views):
            monkeypatch.setattr(module, "in_thread", lambda step: sync_to_async(step))
    settings.METRICS_TOKEN = METRICS_TOKEN
    settings.METRICS_ALLOWED_NETWORKS = []
    grant(world, door)
    method, template = door.what.split(" ", 1)
    path = world.path(template)
    api = door.kind in ("api", "door")
    seen = {}
    for actor, expected in zip(ACTORS, door.expected, strict=True):
        bearer = METRICS_TOKEN if door.perm == "METRICS_TOKEN" and actor == "staff_perm" else None
        client = client_for(world, actor, api=api, bearer=bearer)
        with transaction.atomic():  # what one actor changes (a cancel) is undone for the next
            if method == "GET":
                response = client.get(path)
            elif api:
                body = POST_BODIES.get(path, POST_BODIES.get(template, {}))
                send = {"PUT": client.put, "DELETE": client.delete}.get(method, client.post)
                response = send(path, body, content_type="application/json")
            else:
                response = client.post(path, {})
            seen[actor] = observe(response, expected)
            transaction.set_rollback(True)
    assert tuple(seen.values()) == door.expected, seen


@pytest.mark.parametrize("door", rows_of("action"))
def test_admin_action(door: Door, world: World) -> None:
    label, action = door.what.split(" ")
    grant(world, door)
    make_target, happened = ACTION_EFFECTS[(label, action)]
    seen = {}
    for actor in ACTORS:
        target = make_target(world)  # a fresh one each: the actor before may have done it
        post_action(client_for(world, actor, api=False), world, label, action, target)
        seen[actor] = "done" if happened(world, target) else "refused"
    assert tuple(seen.values()) == door.expected, seen


# --- API key scopes: one row per scope, the doors it opens ---------------------------------------

# fmt: off
SCOPES: dict[str | None, list[str]] = {
    "jobs:read": [
        "GET /api/v1/jobs/", "GET /api/v1/jobs/{job}/", "GET /api/v1/batches/",
        "GET /api/v1/batches/{batch}/", "GET /api/v1/batches/{batch}/jobs/",
        "GET /api/v1/embeddings/{embedding}/", "GET /api/v1/batches/{embedding_batch}/embeddings/",
        "GET /api/v1/pipelines/", "GET /api/v1/pipelines/{pipeline}/",
        "GET /api/v1/agent-runs/", "GET /api/v1/agent-runs/{agent_run}/", "GET /api/v1/agent-tools/",
        "/ws/jobs/", "/ws/jobs/?job={job}", "/ws/jobs/?job=not-a-uuid", "/ws/jobs/?all=1",
    ],
    "jobs:write": [
        "POST /api/v1/jobs/", "POST /api/v1/jobs/{queued_job}/cancel/", "POST /api/v1/batches/",
        "POST /api/v1/embeddings/",
        "POST /api/v1/batches/{batch}/cancel/", "POST /api/v1/pipelines/",
        "POST /api/v1/pipelines/{pipeline}/cancel/", "POST /api/v1/agent-runs/",
        "POST /api/v1/agent-runs/{agent_run}/approvals/{agent_call}/",
        "POST /api/v1/agent-runs/{agent_run}/cancel/", "POST /live/fault-jobs/",
        "POST /api/v1/webhooks/signing-secret/",
    ],
    "costs:read": ["GET /api/v1/costs/", "GET /api/v1/costs/?user={owner}"],
    "admin": [
        "GET /api/v1/budgets/", "GET /api/v1/budgets/{budget}/", "GET /api/v1/failures/",
        "POST /api/v1/failures/{failure}/requeue/", "POST /api/v1/failures/{failure}/resolve/",
        "GET /api/v1/features/", "GET /api/v1/features/{feature}/", "PUT /api/v1/features/{feature}/",
        "GET /api/v1/keys/", "POST /api/v1/keys/", "POST /api/v1/keys/{api_key}/revoke/",
        "POST /api/v1/keys/{api_key}/rotate/", "GET /api/v1/mcp-servers/", "POST /api/v1/mcp-servers/",
    ],
    None: ["GET /api/v1/me/"],  # any key: who am I
}
# fmt: on
"""Which scope each API-key door asks for (``None``: any key). A key without it answers
``403 insufficient_scope`` naming it; a key with only it passes as a key with every scope."""
SCOPE_OF = {door: scope for scope, doors in SCOPES.items() for door in doors}
SCOPE_ROWS = [
    pytest.param(door, id=f"{SCOPE_OF[door.what]} {door}")
    for door in TABLE
    if door.kind == "api" and SCOPE_OF.get(door.what)
]


def _scope_actor(door: Door) -> str:
    """Who the door lets in with a key of every scope: the owner, else the staff member."""
    return "owner" if door.expected[0] not in (403, 404) else "staff_perm"


@pytest.mark.parametrize("door", SCOPE_ROWS)
def test_scope_door(door: Door, world: World) -> None:
    """The row's scope opens the door on its own; every other scope together does not."""
    from keys.scopes import ALL_SCOPES
    from keys.testing import api_key_for

    grant(world, door)
    scope = SCOPE_OF[door.what]
    actor = _scope_actor(door)
    user = world.users[actor]
    method, template = door.what.split(" ", 1)
    path = world.path(template)
    expected = door.expected[ACTORS.index(actor)]
    seen = {}
    for case, scopes in (("only", [scope]), ("all but", [s for s in ALL_SCOPES if s != scope])):
        with transaction.atomic():
            client = client_for(world, actor, api=True, bearer=api_key_for(user, scopes=scopes))  # type: ignore[arg-type]
            if method == "GET":
                response = client.get(path)
            else:
                body = POST_BODIES.get(path, POST_BODIES.get(template, {}))
                send = client.put if method == "PUT" else client.post
                response = send(path, body, content_type="application/json")
            seen[case] = observe(response, expected)
            if case == "all but":
                assert response.status_code == 403, response.content
                body = response.json()
                assert body["code"] == "insufficient_scope", body
                assert body["detail"]["required_scope"] == scope and scope in body["message"]
                assert f'scope="{scope}"' in response["WWW-Authenticate"]
            transaction.set_rollback(True)
    assert seen["only"] == expected, seen


def test_every_api_door_names_its_scope() -> None:
    """Every API row of the table and every WebSocket row has its scope in ``SCOPES``, and
    ``SCOPES`` names no door the table does not have."""
    doors = {door.what for door in TABLE if door.kind in ("api", "ws")}
    named = {door for doors in SCOPES.values() for door in doors}
    assert sorted(doors - named) == [], "doors with no scope row"
    assert sorted(named - doors) == [], "scope rows for doors that do not exist"


# --- nothing left out ---------------------------------------------------------------------------


def test_every_door_is_in_the_table() -> None:
    """A URL pattern, WebSocket route or admin action added without its row fails here; so does
    a row for an admin action that no longer exists."""
    covered = {route_of(door.what.split(" ", 1)[1]) for door in TABLE if door.kind in HTTP_KINDS}
    missing_routes = [route for route in every_route() if route not in covered]
    assert not missing_routes, f"URL patterns with no row in the table: {missing_routes}"

    ws_covered = {door.what.split("?")[0].lstrip("/") for door in TABLE if door.kind == "ws"}
    missing_ws = [str(p.pattern) for p in websocket_urlpatterns if str(p.pattern) not in ws_covered]
    assert not missing_ws, f"WebSocket routes with no row in the table: {missing_ws}"

    rows = {door.what for door in TABLE if door.kind == "action"} - ACTION_PAGES
    assert sorted(every_admin_action() - rows) == [], "admin actions with no row in the table"
    assert sorted(rows - every_admin_action()) == [], "rows for admin actions that do not exist"
