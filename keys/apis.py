"""``/api/v1/keys/``: the caller's API keys. Thin views: validate, call one service, serialize.

Managing keys needs a session or a key with the ``admin`` scope; a key may revoke or rotate
itself with any scope (the integration that holds it can roll its own secret)."""

from typing import Any, cast

from django.contrib.auth.models import User
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_serializer,
)
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.pagination import Pagination, paginated_response
from api.schema import PAGE_NOT_FOUND, error_headers, errors
from keys.models import ApiKey
from keys.permissions import request_api_key
from keys.scopes import ADMIN, ALL_SCOPES
from keys.selectors import api_key_budget, api_key_get_for_user, api_key_list_for_user
from keys.services import (
    api_key_check_covers,
    api_key_create,
    api_key_grant,
    api_key_revoke,
    api_key_rotate,
)
from keys.validation import BUDGET_PERIODS, validate_key_request, validate_rotate_request

__all__ = ["KeyListCreateApi", "KeyRevokeApi", "KeyRotateApi"]

KEY_ID = OpenApiParameter(
    "key_id",
    OpenApiTypes.INT,
    OpenApiParameter.PATH,
    description="The key's id; another user's key answers 404.",
)


@extend_schema_serializer(component_name="ApiKey")
class KeyOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    prefix = serializers.CharField(help_text="The start of the secret, to tell keys apart.")
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=ALL_SCOPES))
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    last_used_at = serializers.DateTimeField(
        allow_null=True, help_text="Written at most once a minute."
    )
    revoked_at = serializers.DateTimeField(allow_null=True)
    active = serializers.BooleanField(source="is_active")
    rpm = serializers.IntegerField(allow_null=True, help_text="Submissions per minute.")
    max_budget_usd = serializers.SerializerMethodField()
    budget_period = serializers.SerializerMethodField()

    @extend_schema_field(serializers.DecimalField(max_digits=14, decimal_places=6, allow_null=True))
    def get_max_budget_usd(self, key: ApiKey) -> str | None:
        budget = api_key_budget(key)
        return f"{budget.limit_usd:.6f}" if budget else None

    @extend_schema_field(serializers.ChoiceField(choices=BUDGET_PERIODS, allow_null=True))
    def get_budget_period(self, key: ApiKey) -> str | None:
        budget = api_key_budget(key)
        return budget.period if budget else None


@extend_schema_serializer(component_name="ApiKeyCreated")
class KeyCreatedSerializer(KeyOutputSerializer):
    key = serializers.CharField(help_text="The secret: shown in this answer only, never again.")


@extend_schema_serializer(component_name="ApiKeyRotated")
class KeyRotatedSerializer(KeyCreatedSerializer):
    previous_key_expires_at = serializers.DateTimeField(
        help_text="When the secret(s) the key had before stop working."
    )


@extend_schema_serializer(component_name="ApiKeyCreate")
class KeyInputSerializer(serializers.Serializer):
    """For the schema: the service validates the body itself (keys/validation.py)."""

    name = serializers.CharField(max_length=100)
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=ALL_SCOPES))
    expires_at = serializers.DateTimeField(
        required=False, allow_null=True, help_text="In the future; null or absent: never."
    )
    max_budget_usd = serializers.DecimalField(
        max_digits=14, decimal_places=6, required=False, allow_null=True
    )
    budget_period = serializers.ChoiceField(choices=BUDGET_PERIODS, required=False)
    rpm = serializers.IntegerField(min_value=1, required=False, allow_null=True)


@extend_schema_serializer(component_name="ApiKeyRotate")
class KeyRotateInputSerializer(serializers.Serializer):
    grace_seconds = serializers.IntegerField(
        required=False,
        min_value=0,
        help_text="How long the old secret keeps working (default 86400: 24 hours).",
    )


def _key_data(api_key: ApiKey, /, **extra: Any) -> dict[str, Any]:
    return {**KeyOutputSerializer(api_key).data, **extra}


class KeyListCreateApi(APIView):
    required_scopes = {"GET": ADMIN, "POST": ADMIN}
    pagination_class = Pagination

    @extend_schema(
        operation_id="keys_create",
        summary="Create an API key (its secret is shown once, in this answer)",
        request=KeyInputSerializer,
        parameters=error_headers(),
        responses={
            201: KeyCreatedSerializer,
            **errors(
                {
                    400: [
                        "invalid_body",
                        "unknown_field",
                        "invalid_name",
                        "invalid_scopes",
                        "invalid_expires_at",
                        "invalid_max_budget_usd",
                        "invalid_budget_period",
                        "invalid_rpm",
                    ],
                    413: [],
                    415: [],
                }
            ),
        },
    )
    def post(self, request: Request) -> Response:
        caller = request_api_key(request)
        key_request = api_key_grant(caller=caller, request=validate_key_request(request.data))
        key, secret = api_key_create(
            user=cast(User, request.user), request=key_request, parent=caller
        )
        key = api_key_get_for_user(user=cast(User, request.user), key_id=key.id)
        return Response(_key_data(key, key=secret), status=status.HTTP_201_CREATED)

    @extend_schema(
        operation_id="keys_list",
        summary="The caller's API keys, newest first (never their secrets)",
        parameters=error_headers(),
        responses={
            200: KeyOutputSerializer(many=True),
            **errors({404: []}, descriptions=PAGE_NOT_FOUND),
        },
    )
    def get(self, request: Request) -> Response:
        keys = api_key_list_for_user(user=cast(User, request.user))
        return paginated_response(request, self, keys, KeyOutputSerializer)


class KeyRevokeApi(APIView):
    required_scopes = {"POST": ADMIN}
    own_key_needs_no_scope = True

    @extend_schema(
        operation_id="keys_revoke",
        summary="Revoke a key: every secret of it answers 401 at once",
        description="Any key may revoke itself; another of your keys needs `admin`, and only a "
        "key that holds at least that key's scopes, lifetime, budget and rate may revoke it.",
        request=None,
        parameters=[KEY_ID, *error_headers()],
        responses={
            200: KeyOutputSerializer,
            **errors({403: ["key_not_covered"], 404: ["key_not_found"]}),
        },
    )
    def post(self, request: Request, key_id: int) -> Response:
        key = api_key_get_for_user(user=cast(User, request.user), key_id=key_id)
        api_key_check_covers(caller=request_api_key(request), target=key, action="revoke")
        api_key_revoke(key=key)
        key = api_key_get_for_user(user=cast(User, request.user), key_id=key_id)
        return Response(_key_data(key))


class KeyRotateApi(APIView):
    required_scopes = {"POST": ADMIN}
    own_key_needs_no_scope = True

    @extend_schema(
        operation_id="keys_rotate",
        summary="Rotate a key: a new secret, the old one working for a grace period",
        description="The key keeps its id, scopes, expiry, budget and rate. The old secret "
        "works `grace_seconds` more (default 24 hours); revoking the key ends both at once. "
        "Any key may rotate itself; another of your keys needs `admin`, and only a key that holds "
        "at least that key's scopes, lifetime, budget and rate may rotate it.",
        request=KeyRotateInputSerializer,
        parameters=[KEY_ID, *error_headers()],
        responses={
            200: OpenApiResponse(KeyRotatedSerializer, description="The new secret, once."),
            **errors(
                {
                    400: ["invalid_body", "unknown_field", "invalid_grace_seconds"],
                    403: ["key_not_covered"],
                    404: ["key_not_found"],
                    409: ["key_revoked", "key_expired"],
                    413: [],
                    415: [],
                }
            ),
        },
    )
    def post(self, request: Request, key_id: int) -> Response:
        grace = validate_rotate_request(request.data)
        key = api_key_get_for_user(user=cast(User, request.user), key_id=key_id)
        api_key_check_covers(caller=request_api_key(request), target=key, action="rotate")
        rotation = api_key_rotate(key=key, grace_seconds=grace)
        key = api_key_get_for_user(user=cast(User, request.user), key_id=key_id)
        return Response(
            _key_data(
                key,
                key=rotation.secret,
                previous_key_expires_at=serializers.DateTimeField().to_representation(
                    rotation.previous_expires_at
                ),
            )
        )
