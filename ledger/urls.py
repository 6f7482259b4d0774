from django.urls import path

from ledger.apis import CostReportApi

app_name = "ledger"

urlpatterns = [
    path("", CostReportApi.as_view(), name="cost-report"),
]
