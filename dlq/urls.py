from django.urls import path

from dlq.apis import FailureListApi, FailureRequeueApi, FailureResolveApi

# The namespace it had under alerts/: the URL names do not change.
app_name = "alerts"

urlpatterns = [
    path("", FailureListApi.as_view(), name="failure-list"),
    path("<int:failure_id>/requeue/", FailureRequeueApi.as_view(), name="failure-requeue"),
    path("<int:failure_id>/resolve/", FailureResolveApi.as_view(), name="failure-resolve"),
]
