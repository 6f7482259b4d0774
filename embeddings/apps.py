from django.apps import AppConfig


class EmbeddingsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "embeddings"
    verbose_name = "Embeddings"
