"""Staff API of the feature policies: ``GET /api/v1/features/``, ``GET``/``PUT
/api/v1/features/<feature>/``. Thin: validate, call one service, serialize."""

from typing import Any, cast

from django.contrib.auth.models import User
from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import BasePermission, IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.errors import ApplicationError, ValidationFailed
from api.pagination import paginated_response
from api.schema import error_headers, errors, page_responses
from features.models import FeaturePolicy
from features.selectors import feature_policies, feature_policy_for, parked_count
from features.services import (
    UNCHANGED,
    feature_policy_update,
    validate_feature,
    validate_paused,
)
from jobs.priorities import PRIORITY_CHOICES
from keys.permissions import HasScope
from keys.scopes import ADMIN

POLICY_FIELDS = ("fallback_models", "mode", "deadline_seconds", "paused", "default_priority")
"""What a PUT may set; a field left out keeps its value."""


class FeaturePolicyOutputSerializer(serializers.Serializer):
    feature = serializers.CharField()
    fallback_models = serializers.ListField(
        child=serializers.CharField(),
        help_text="Models tried in order after the job's own one (jobs/fallbacks.py).",
    )
    mode = serializers.CharField(
        help_text="realtime or deferred: the mode of the feature's jobs that ask for none."
    )
    deadline_seconds = serializers.IntegerField(
        allow_null=True,
        help_text="The deadline of the feature's jobs that give none, in seconds from submit.",
    )
    paused = serializers.BooleanField(
        help_text="True: its jobs are accepted and wait (held_reason feature_paused), nothing "
        "is sent; resumed, they run in their order."
    )
    default_priority = serializers.CharField(
        allow_null=True,
        help_text="high, normal or low: the priority of its jobs that ask for none (null: "
        "normal, or high for a feature in LLM_PRIORITY_FEATURES).",
    )
    waiting = serializers.IntegerField(
        help_text="Its jobs parked while it is paused (queued or retrying, held_reason set)."
    )
    configured = serializers.BooleanField(
        help_text="False: the feature has no policy yet and shows the defaults."
    )
    updated_at = serializers.DateTimeField(allow_null=True)
    updated_by = serializers.CharField(allow_null=True)


def _body(policy: FeaturePolicy | None, feature: str) -> dict[str, Any]:
    if policy is None:
        return {
            "feature": feature,
            "fallback_models": [],
            "mode": "realtime",
            "deadline_seconds": None,
            "paused": False,
            "default_priority": None,
            "waiting": 0,
            "configured": False,
            "updated_at": None,
            "updated_by": None,
        }
    return {
        "feature": policy.feature,
        "fallback_models": list(policy.fallback_models or []),
        "mode": policy.mode,
        "deadline_seconds": policy.deadline_seconds,
        "paused": policy.paused,
        "default_priority": policy.default_priority or None,
        "waiting": parked_count(feature=policy.feature) if policy.paused else 0,
        "configured": True,
        "updated_at": policy.updated_at,
        "updated_by": policy.updated_by.get_username() if policy.updated_by else None,
    }


class CanViewFeatures(BasePermission):
    message = "You do not have permission to view feature policies."

    def has_permission(self, request, view):  # type: ignore[no-untyped-def]
        user = request.user
        return user.has_perm("features.view_featurepolicy") or user.has_perm(
            "features.change_featurepolicy"
        )


class FeatureListApi(APIView):
    required_scopes = {"GET": ADMIN}
    permission_classes = [HasScope, IsAdminUser, CanViewFeatures]
    pagination_class = PageNumberPagination

    @extend_schema(
        operation_id="features_list",
        summary="Every feature policy (staff with the view or change permission)",
        parameters=error_headers(),
        responses=page_responses(FeaturePolicyOutputSerializer, {403: ["permission_denied"]}),
    )
    def get(self, request: Request) -> Response:
        return paginated_response(
            request,
            self,
            feature_policies(),
            FeaturePolicyOutputSerializer,
            rows_for_page=lambda page: [_body(p, p.feature) for p in page],
        )


class FeatureDetailApi(APIView):
    required_scopes = {"GET": ADMIN, "PUT": ADMIN}
    permission_classes = [HasScope, IsAdminUser, CanViewFeatures]

    @extend_schema_serializer(
        component_name="FeaturePolicyUpdate",
        examples=[
            OpenApiExample(
                "Fall back to Haiku, then a self-hosted model",
                value={"fallback_models": ["claude-haiku-4-5", "llama3.1:8b"]},
                request_only=True,
            )
        ],
    )
    class InputSerializer(serializers.Serializer):
        fallback_models = serializers.JSONField(
            required=False, help_text="Priced models in order, at most 5; [] removes every one."
        )
        mode = serializers.ChoiceField(
            choices=["realtime", "deferred"],
            required=False,
            help_text="The mode of the feature's jobs that ask for none.",
        )
        deadline_seconds = serializers.IntegerField(
            required=False,
            allow_null=True,
            help_text="The deadline of its jobs that give none, in seconds; null removes it.",
        )
        paused = serializers.BooleanField(
            required=False,
            help_text="true: its jobs wait (accepted, nothing sent); false: resumed, they run.",
        )
        default_priority = serializers.ChoiceField(
            choices=PRIORITY_CHOICES,
            required=False,
            allow_null=True,
            help_text="The priority of its jobs that ask for none; null removes it.",
        )

    @extend_schema(
        operation_id="features_retrieve",
        summary="One feature's policy; the defaults for a feature without one (staff)",
        parameters=error_headers(),
        responses={
            200: FeaturePolicyOutputSerializer,
            **errors({400: ["invalid_feature"], 403: ["permission_denied"]}),
        },
    )
    def get(self, request: Request, feature: str) -> Response:
        feature = validate_feature(feature)
        return Response(
            FeaturePolicyOutputSerializer(_body(feature_policy_for(feature=feature), feature)).data
        )

    @extend_schema(
        operation_id="features_update",
        summary="Set a feature's policy (staff with the change permission)",
        request=InputSerializer,
        parameters=error_headers(),
        responses={
            200: FeaturePolicyOutputSerializer,
            **errors(
                {
                    400: [
                        "invalid_feature",
                        "invalid_fallback_models",
                        "invalid_mode",
                        "invalid_deadline",
                        "invalid_paused",
                        "invalid_priority",
                        "unknown_model",
                        "unknown_field",
                    ],
                    403: ["permission_denied"],
                    413: [],
                    415: [],
                }
            ),
        },
    )
    def put(self, request: Request, feature: str) -> Response:
        if not request.user.has_perm("features.change_featurepolicy"):
            raise ApplicationError(
                "You do not have permission to change feature policies.",
                code="permission_denied",
                status_code=403,
            )
        data = request.data if isinstance(request.data, dict) else None
        if data is None:
            raise ValidationFailed("The body must be a JSON object.", code="invalid_request")
        unknown = sorted(set(data) - set(POLICY_FIELDS))
        if unknown:
            raise ValidationFailed(
                f"Unknown field: {unknown[0]}.",
                code="unknown_field",
                detail={"field": unknown[0], "fields": list(POLICY_FIELDS)},
            )
        if not data:
            raise ValidationFailed(
                f"Give at least one of {', '.join(POLICY_FIELDS)}.",
                code="invalid_request",
                detail={"fields": list(POLICY_FIELDS)},
            )
        if "fallback_models" in data and data["fallback_models"] is None:
            raise ValidationFailed(
                "fallback_models must be a list of model names.",
                code="invalid_fallback_models",
                detail={"field": "fallback_models"},
            )
        if "mode" in data and data["mode"] is None:
            raise ValidationFailed(
                "mode must be 'realtime' or 'deferred'.",
                code="invalid_mode",
                detail={"field": "mode"},
            )
        policy = feature_policy_update(
            feature=feature,
            fallback_models=data.get("fallback_models"),
            mode=data.get("mode"),
            deadline_seconds=data.get("deadline_seconds", UNCHANGED),
            paused=validate_paused(data["paused"]) if "paused" in data else None,
            default_priority=data.get("default_priority", UNCHANGED),
            by=cast(User, request.user),
        )
        return Response(FeaturePolicyOutputSerializer(_body(policy, policy.feature)).data)
