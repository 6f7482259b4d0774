from django.urls import path

from batches.apis import (
    BatchCancelApi,
    BatchDetailApi,
    BatchEmbeddingsApi,
    BatchJobsApi,
    BatchListCreateApi,
)

app_name = "batches"

urlpatterns = [
    path("", BatchListCreateApi.as_view(), name="batch-list"),
    path("<str:batch_id>/", BatchDetailApi.as_view(), name="batch-detail"),
    path("<str:batch_id>/jobs/", BatchJobsApi.as_view(), name="batch-jobs"),
    path("<str:batch_id>/embeddings/", BatchEmbeddingsApi.as_view(), name="batch-embeddings"),
    path("<str:batch_id>/cancel/", BatchCancelApi.as_view(), name="batch-cancel"),
]
