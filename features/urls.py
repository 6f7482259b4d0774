from django.urls import path

from features.apis import FeatureDetailApi, FeatureListApi

app_name = "features"

urlpatterns = [
    path("", FeatureListApi.as_view(), name="feature-list"),
    path("<str:feature>/", FeatureDetailApi.as_view(), name="feature-detail"),
]
