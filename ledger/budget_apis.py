"""Staff API for budgets: each budget's current window and forecast, as the admin shows them."""

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.errors import NotFound
from api.pagination import paginated_response
from api.schema import error_headers, errors, page_responses
from keys.permissions import HasScope
from keys.scopes import ADMIN
from ledger.forecast import budget_status, budget_statuses
from ledger.models import Budget


def _money(source: str | None = None) -> serializers.DecimalField:
    # Money as a string with the ledger's 6 decimal places, whatever the magnitude.
    return serializers.DecimalField(
        max_digits=20, decimal_places=6, coerce_to_string=True, source=source
    )


class BudgetWindowSerializer(serializers.Serializer):
    start = serializers.DateTimeField(source="window_start")
    end = serializers.DateTimeField(source="window_end")


class ForecastSerializer(serializers.Serializer):
    burn_rate_usd_per_hour = _money()
    projected_spend_usd = _money()
    projected_exhaustion_at = serializers.DateTimeField(allow_null=True)


class BudgetStatusOutputSerializer(serializers.Serializer):
    """One ``ledger.forecast.BudgetStatus``: the budget's settings, its window, its forecast."""

    id = serializers.IntegerField(source="budget.id")
    name = serializers.CharField(source="budget.name")
    scope = serializers.CharField(source="budget.scope")
    feature = serializers.SerializerMethodField()
    user = serializers.SerializerMethodField()
    user_id = serializers.IntegerField(source="budget.user_id", allow_null=True)
    api_key_id = serializers.IntegerField(
        source="budget.api_key_id", allow_null=True, help_text="For a key budget."
    )
    period = serializers.CharField(source="budget.period")
    limit_usd = _money("budget.limit_usd")
    soft_alert_percent = serializers.IntegerField(source="budget.soft_alert_percent")
    on_exceed = serializers.CharField(source="budget.on_exceed")
    enabled = serializers.BooleanField(source="budget.enabled")
    window = BudgetWindowSerializer(source="usage")
    spent_usd = _money("usage.spent_usd")
    reserved_usd = _money("usage.reserved_usd")
    remaining_usd = _money("usage.remaining_usd")
    percent_used = serializers.DecimalField(
        source="usage.percent_used", max_digits=10, decimal_places=1, coerce_to_string=True
    )
    exhausted = serializers.BooleanField(source="usage.exhausted")
    forecast = ForecastSerializer()

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_feature(self, status: object) -> str | None:
        return status.budget.feature or None  # type: ignore[attr-defined]

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_user(self, status: object) -> str | None:
        user = status.budget.user  # type: ignore[attr-defined]
        return user.get_username() if user else None


class BudgetListApi(APIView):
    required_scopes = {"GET": ADMIN}
    # Staff only: budgets show every feature's and every user's spend.
    permission_classes = [HasScope, IsAdminUser]
    pagination_class = PageNumberPagination

    @extend_schema(
        operation_id="budgets_list",
        summary="Every budget with its current window and forecast (staff)",
        parameters=error_headers(),
        responses=page_responses(BudgetStatusOutputSerializer, {403: ["permission_denied"]}),
    )
    def get(self, request: Request) -> Response:
        budgets = Budget.objects.select_related("user", "api_key").order_by("id")
        return paginated_response(
            request,
            self,
            budgets,
            BudgetStatusOutputSerializer,
            rows_for_page=lambda page: budget_statuses(budgets=page),
        )


class BudgetDetailApi(APIView):
    required_scopes = {"GET": ADMIN}
    # Staff only: budgets show every feature's and every user's spend.
    permission_classes = [HasScope, IsAdminUser]

    @extend_schema(
        operation_id="budgets_retrieve",
        summary="One budget with its current window and forecast (staff)",
        parameters=error_headers(),
        responses={
            200: BudgetStatusOutputSerializer,
            **errors({403: ["permission_denied"], 404: ["budget_not_found"]}),
        },
    )
    def get(self, request: Request, budget_id: int) -> Response:
        budget = Budget.objects.select_related("user", "api_key").filter(id=budget_id).first()
        if budget is None:
            raise NotFound("No such budget.", code="budget_not_found")
        return Response(BudgetStatusOutputSerializer(budget_status(budget=budget)).data)
