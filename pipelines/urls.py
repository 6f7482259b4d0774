from django.urls import path

from pipelines.apis import PipelineCancelApi, PipelineDetailApi, PipelineListCreateApi

app_name = "pipelines"

urlpatterns = [
    path("", PipelineListCreateApi.as_view(), name="pipeline-list"),
    path("<str:pipeline_id>/", PipelineDetailApi.as_view(), name="pipeline-detail"),
    path("<str:pipeline_id>/cancel/", PipelineCancelApi.as_view(), name="pipeline-cancel"),
]
