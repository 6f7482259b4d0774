"""docs/security.md's tables hold: each sensitive admin form and API call of the first table is
tried by staff holding each single permission of the sensitive apps (plus what the row says the
door also needs), and opens with the permission the row names and with no other; the second
table names the scope each API method asks of a key, for every API route. Real MariaDB."""

import re
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from features.models import FeaturePolicy
from keys.models import ApiKey
from keys.permissions import required_scope
from keys.testing import api_key_for
from ledger.models import Budget, ModelPrice
from providers.models import Provider
from tests.authorization_effects import post_action
from tests.authorization_world import World

DOC = Path(__file__).resolve().parents[1] / "docs" / "security.md"
SENSITIVE_APPS = ("providers", "keys", "ledger", "features", "audit", "auth", "dlq", "jobs")
"""Every permission of these apps is tried at every door of the first table."""


def _table(heading: str) -> list[list[str]]:
    text = DOC.read_text()
    section = text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[1:]]


def _ticked(cell: str) -> list[str]:
    return re.findall(r"`([a-z_]+\.[a-z_]+)`", cell)


# Each door: (try it as ``client``, a session of the staff user) -> did it happen?
Door = Callable[[Client, User], bool]


def _anthropic_as_seeded() -> Provider:
    Provider.objects.filter(name="anthropic").update(
        base_url="", api_key_env="ANTHROPIC_API_KEY", enabled=True
    )
    return Provider.objects.get(name="anthropic")


def _provider_endpoint(client: Client, user: User) -> bool:
    row = _anthropic_as_seeded()
    client.post(
        f"/admin/providers/provider/{row.pk}/change/",
        {"kind": "anthropic", "base_url": "http://moved.example/v1", "api_key_env": "EU_API_KEY",
         "enabled": "on"},
    )  # fmt: skip
    row.refresh_from_db()
    return row.base_url == "http://moved.example/v1" or row.api_key_env == "EU_API_KEY"


def _provider_enable(client: Client, user: User) -> bool:
    row = _anthropic_as_seeded()
    client.post(
        f"/admin/providers/provider/{row.pk}/change/",
        {"kind": row.kind, "base_url": row.base_url, "api_key_env": row.api_key_env},
    )
    row.refresh_from_db()
    return not row.enabled


def _key_add(client: Client, user: User, *, for_user: User) -> bool:
    ApiKey.objects.filter(name="door").update(name="door-before")
    client.post(
        "/admin/keys/apikey/add/",
        {"user": for_user.pk, "name": "door", "scopes": ["jobs:read"], "budget_period": "month"},
    )
    return ApiKey.objects.filter(user=for_user, name="door").exists()


def _key_for_self(client: Client, user: User) -> bool:
    return _key_add(client, user, for_user=user)


def _key_for_another_user(client: Client, user: User) -> bool:
    other = User.objects.get_or_create(username="root-other", is_superuser=True, is_staff=True)[0]
    return _key_add(client, user, for_user=other)


def _key_revoke_any(client: Client, user: User) -> bool:
    owner = User.objects.get_or_create(username="key-owner")[0]
    key = ApiKey.objects.get(prefix=api_key_for(owner)[:12])
    post_action(client, World(users={}, tokens={}), "keys.ApiKey", "revoke_keys", key)
    key.refresh_from_db()
    return key.revoked_at is not None


def _budget_change(client: Client, user: User) -> bool:
    budget = Budget.objects.create(scope="feature", feature="doors", limit_usd=Decimal("5"))
    client.post(
        f"/admin/ledger/budget/{budget.pk}/change/",
        {"scope": "feature", "feature": "doors", "period": "month", "limit_usd": "500",
         "soft_alert_percent": "80", "on_exceed": "reject", "enabled": "on"},
    )  # fmt: skip
    budget.refresh_from_db()
    return budget.limit_usd == Decimal("500")


def _price_add(client: Client, user: User) -> bool:
    ModelPrice.objects.filter(model="door-model").delete()
    client.post(
        "/admin/ledger/modelprice/add/",
        {"model": "door-model", "provider": "anthropic", "kind": "chat",
         "effective_from_0": "2026-01-01", "effective_from_1": "00:00:00",
         "input_per_mtok": "1", "output_per_mtok": "2", "cache_write_5m_per_mtok": "1",
         "cache_write_1h_per_mtok": "1", "cache_read_per_mtok": "0.1", "batch_discount": "0.5",
         "max_output_tokens": "4096", "web_search_per_request": "0"},
    )  # fmt: skip
    return ModelPrice.objects.filter(model="door-model").exists()


def _policy_form(client: Client, path: str) -> None:
    client.post(path, {"feature": "doors", "fallback_models": "", "mode": "deferred"})


def _feature_policy_change(client: Client, user: User) -> bool:
    FeaturePolicy.objects.filter(feature="doors").delete()
    policy = FeaturePolicy.objects.create(feature="doors")
    _policy_form(client, f"/admin/features/featurepolicy/{policy.pk}/change/")
    policy.refresh_from_db()
    return policy.mode == "deferred"


def _feature_policy_put(client: Client, user: User) -> bool:
    FeaturePolicy.objects.filter(feature="doors").delete()
    api = APIClient(HTTP_AUTHORIZATION=f"Bearer {api_key_for(user, scopes=['admin'])}")
    api.put("/api/v1/features/doors/", {"mode": "deferred"}, format="json")
    return FeaturePolicy.objects.filter(feature="doors", mode="deferred").exists()


def _audit_delete(client: Client, user: User) -> bool:
    from audit.models import AuditRecord
    from audit.services import audit_record

    record = audit_record(
        action="changed", target_type="ledger.budget", target_id=0, target="doors", changes={}
    )
    post_action(client, World(users={}, tokens={}), "audit.AuditRecord", "delete_selected", record)
    return not AuditRecord.objects.filter(pk=record.pk).exists()


DOORS: dict[str, Door] = {
    "admin-provider-endpoint": _provider_endpoint,
    "admin-provider-enable": _provider_enable,
    "admin-key-for-self": _key_for_self,
    "admin-key-for-another-user": _key_for_another_user,
    "admin-key-revoke-any": _key_revoke_any,
    "admin-budget-change": _budget_change,
    "admin-price-add": _price_add,
    "admin-feature-policy-change": _feature_policy_change,
    "api-feature-policy-put": _feature_policy_put,
    "admin-audit-delete": _audit_delete,
}

PERMISSION_ROWS = {row[0].strip("`"): row for row in _table("Staff permissions")}


def test_every_door_of_the_table_is_tried_and_every_tried_door_is_in_the_table() -> None:
    assert set(PERMISSION_ROWS) == set(DOORS)


def _try(door: str, user: User) -> bool:
    client = Client()
    client.force_login(user)
    return DOORS[door](client, user)


def _staff(name: str, perms: list[Permission], *, superuser: bool = False) -> User:
    user = User.objects.create_user(name, is_staff=True, is_superuser=superuser)
    user.user_permissions.set(perms)
    return User.objects.get(pk=user.pk)  # a fresh object: no cached permissions


def _codename(permission: Permission) -> str:
    return f"{permission.content_type.app_label}.{permission.codename}"


@pytest.mark.django_db
@pytest.mark.parametrize("door", sorted(DOORS))
def test_each_door_opens_with_its_permission_and_no_other_single_one(door: str) -> None:
    _name, opens_cell, needs_cell, _what = PERMISSION_ROWS[door]
    opens, needs = _ticked(opens_cell), _ticked(needs_cell)
    everything = Permission.objects.filter(
        content_type__app_label__in=SENSITIVE_APPS
    ).select_related("content_type")
    by_name = {_codename(p): p for p in everything}
    by_name.update(
        {
            _codename(p): p
            for p in Permission.objects.filter(codename__in=[n.split(".")[1] for n in needs])
        }
    )
    base = [by_name[name] for name in needs]
    opened_by = []
    for serial, permission in enumerate(everything):
        user = _staff(f"staff-{serial}", [*base, permission])
        if _try(door, user):
            opened_by.append(_codename(permission))
    assert opened_by == opens, f"{door}: opened by {opened_by}, the table says {opens}"
    if opens:  # with what the row says, the door does open
        assert _try(door, _staff("holder", [*base, *(by_name[n] for n in opens)]))
    superuser_opens = "no one" not in opens_cell
    assert _try(door, _staff("root", [], superuser=True)) == superuser_opens


# --- the key scope table --------------------------------------------------------------------


def _api_routes(resolver: URLResolver | None = None, prefix: str = "") -> list[tuple[str, Any]]:
    found = []
    for pattern in (resolver or get_resolver()).url_patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            found += _api_routes(pattern, route)
        elif isinstance(pattern, URLPattern) and route.startswith("api/v1/"):
            found.append((route, pattern.callback))
    return found


def _doc_path(route: str) -> str:
    return "/" + re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", lambda m: _PLACEHOLDER[m[1]], route)


_PLACEHOLDER = {"feature": "<feature>", "call_id": "<call>"}


class _Ids(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "<id>"


_PLACEHOLDER = _Ids(_PLACEHOLDER)


def _documented_scopes() -> dict[str, str]:
    documented = {}
    for call, scope in _table("API key scopes"):
        match = re.fullmatch(r"`(GET|POST|PUT|DELETE) ([^`]+)`", call)
        if match:
            documented[f"{match[1]} {match[2]}"] = scope.split(" (")[0].strip("`")
    return documented


def test_the_scope_table_names_what_every_api_method_asks_of_a_key() -> None:
    documented = _documented_scopes()
    served = {}
    for route, callback in _api_routes():
        view = getattr(callback, "view_class", None) or getattr(callback, "cls", None)
        if view is None:
            continue
        for method in ("get", "post", "put", "delete"):
            if hasattr(view, method):
                scope = required_scope(view(), method.upper())
                served[f"{method.upper()} {_doc_path(route)}"] = scope or "any"
    assert served == documented
