from django.urls import path

from embeddings.apis import EmbeddingCreateApi, EmbeddingDetailApi

app_name = "embeddings"

urlpatterns = [
    path("", EmbeddingCreateApi.as_view(), name="embedding-list"),
    path("<str:embedding_id>/", EmbeddingDetailApi.as_view(), name="embedding-detail"),
]
