"""Thin DRF views over the ledger: validate, call a selector, serialize."""

from datetime import datetime
from typing import Any, cast

from django.contrib.auth.models import User
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.errors import ApplicationError
from api.schema import error_headers, errors
from jobs.selectors import deadline_attainment
from keys.scopes import COSTS_READ
from ledger.selectors import (
    REPORT_GROUPS,
    CostReport,
    cost_report,
    report_range_parse,
    report_user_find,
)


def sees_every_users_spend(user: User) -> bool:
    """Staff who may read the ledger's rows (``ledger.view_costentry``), the right the admin's cost
    report asks for; anyone else, staff included, sees only their own spend."""
    return user.is_staff and user.has_perm("ledger.view_costentry")


def _utc(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


class CostReportRowSerializer(serializers.Serializer):
    key = serializers.CharField(allow_null=True)
    jobs = serializers.IntegerField()
    attempts = serializers.IntegerField()
    tokens = serializers.DictField(child=serializers.IntegerField())
    cost_usd = serializers.DecimalField(max_digits=16, decimal_places=6, coerce_to_string=True)
    failures = serializers.IntegerField()
    batch_saved_usd = serializers.DecimalField(
        max_digits=16,
        decimal_places=6,
        coerce_to_string=True,
        help_text="What deferred work saved against the standard price (Message Batches).",
    )


class CostReportTotalsSerializer(CostReportRowSerializer):
    key = None  # type: ignore[assignment]


class CostReportFiltersSerializer(serializers.Serializer):
    feature = serializers.CharField(allow_null=True)
    model = serializers.CharField(allow_null=True)
    user = serializers.CharField(allow_null=True, help_text="The username reported on.")


class DeadlineAttainmentSerializer(serializers.Serializer):
    feature = serializers.CharField()
    with_deadline = serializers.IntegerField(
        help_text="Jobs of the feature whose deadline fell in the period and has passed."
    )
    met = serializers.IntegerField(help_text="Those of them completed by their deadline.")
    ratio = serializers.FloatField(help_text="met / with_deadline.")


class CostReportSerializer(serializers.Serializer):
    """What ``cost_report_data`` returns, for the schema."""

    group_by = serializers.ChoiceField(choices=REPORT_GROUPS)
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    filters = CostReportFiltersSerializer()
    rows = CostReportRowSerializer(many=True)
    totals = CostReportTotalsSerializer()
    deadline_attainment = DeadlineAttainmentSerializer(
        many=True,
        help_text="Per feature, of the same user and feature filters (not model): jobs "
        "completed by their deadline / jobs whose deadline fell in the period and has passed.",
    )


_TIME = (
    "An ISO date or datetime (UTC unless it says otherwise) or a relative time such as 7d, "
    "24h or 30m."
)


def cost_report_data(report: CostReport, filters: dict[str, Any]) -> dict[str, Any]:
    """The JSON body of a report; the admin's CSV and the command read the same ``CostReport``."""
    totals = CostReportRowSerializer(report.totals).data
    totals.pop("key")
    return {
        "group_by": report.group_by,
        "since": _utc(report.since),
        "until": _utc(report.until),
        "filters": filters,
        "rows": CostReportRowSerializer(report.rows, many=True).data,
        "totals": totals,
    }


class CostReportApi(APIView):
    """``GET /api/v1/costs/?group_by=feature|model|user|day|key|tag&since=&until=&feature=``
    ``&model=&user=``, with the deadline attainment per feature of the same period.

    Staff with ``ledger.view_costentry`` see every user's spend and may filter by ``user``
    (username or id); anyone else sees only their own, and a ``user`` filter naming anyone else
    is refused (403).
    """

    required_scopes = {"GET": COSTS_READ}

    @extend_schema(
        operation_id="costs_report",
        summary="Spend grouped by feature, model, user, day, API key or tag",
        parameters=[
            OpenApiParameter("group_by", enum=list(REPORT_GROUPS), default=REPORT_GROUPS[0]),
            OpenApiParameter("since", str, description=f"{_TIME} Default: 30 days before until."),
            OpenApiParameter("until", str, description=f"{_TIME} Default: now."),
            OpenApiParameter("feature", str),
            OpenApiParameter("model", str),
            OpenApiParameter(
                "user",
                str,
                description="Username or id; another user's needs ledger.view_costentry.",
            ),
            *error_headers(),
        ],
        responses={
            200: CostReportSerializer,
            **errors({400: ["invalid_filter"], 403: ["permission_denied"]}),
        },
    )
    def get(self, request: Request) -> Response:
        viewer = cast(User, request.user)
        params = request.query_params
        since, until = report_range_parse(since=params.get("since"), until=params.get("until"))
        user: User | None = None
        if not sees_every_users_spend(viewer):
            if params.get("user") not in (None, "", viewer.get_username(), str(viewer.pk)):
                raise ApplicationError(
                    "Only staff who may read the ledger report on other users; yours is the "
                    "only spend you see.",
                    code="permission_denied",
                    status_code=status.HTTP_403_FORBIDDEN,
                    detail={"field": "user"},
                )
            user = viewer
        elif params.get("user"):
            user = report_user_find(value=params["user"])
        report = cost_report(
            group_by=params.get("group_by") or REPORT_GROUPS[0],
            since=since,
            until=until,
            user=user,
            feature=params.get("feature") or None,
            model=params.get("model") or None,
        )
        filters = {
            "feature": params.get("feature") or None,
            "model": params.get("model") or None,
            "user": user.get_username() if user is not None else None,
        }
        attainment = deadline_attainment(
            since=since,
            until=until,
            user_id=user.pk if user is not None else None,
            feature=params.get("feature") or None,
        )
        body = cost_report_data(report, filters)
        body["deadline_attainment"] = DeadlineAttainmentSerializer(attainment, many=True).data
        return Response(body)
