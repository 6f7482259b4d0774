from django.urls import path

from jobs.apis import JobCancelApi, JobDetailApi, JobListCreateApi

app_name = "jobs"

urlpatterns = [
    path("", JobListCreateApi.as_view(), name="job-list"),
    path("<str:job_id>/", JobDetailApi.as_view(), name="job-detail"),
    path("<str:job_id>/cancel/", JobCancelApi.as_view(), name="job-cancel"),
]
