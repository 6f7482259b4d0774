from django.urls import path

from ledger.budget_apis import BudgetDetailApi, BudgetListApi

app_name = "budgets"

urlpatterns = [
    path("budgets/", BudgetListApi.as_view(), name="budget-list"),
    path("budgets/<int:budget_id>/", BudgetDetailApi.as_view(), name="budget-detail"),
]
