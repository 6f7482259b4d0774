from django.urls import path

from webhooks.apis import SigningSecretApi

app_name = "webhooks"

urlpatterns = [
    path("signing-secret/", SigningSecretApi.as_view(), name="signing-secret"),
]
