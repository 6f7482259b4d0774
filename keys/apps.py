from django.apps import AppConfig


class KeysConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "keys"
    verbose_name = "API keys"

    def ready(self) -> None:
        from keys import checks  # noqa: F401 (registers the hash secret's deploy check)
