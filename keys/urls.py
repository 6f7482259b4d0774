from django.urls import path

from keys.apis import KeyListCreateApi, KeyRevokeApi, KeyRotateApi

app_name = "keys"

urlpatterns = [
    path("", KeyListCreateApi.as_view(), name="key-list"),
    path("<int:key_id>/revoke/", KeyRevokeApi.as_view(), name="key-revoke"),
    path("<int:key_id>/rotate/", KeyRotateApi.as_view(), name="key-rotate"),
]
