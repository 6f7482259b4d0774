from django.apps import AppConfig


class LedgerConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "ledger"

    def ready(self) -> None:
        # Every save or delete of a price or a budget tells every process (signals).
        from ledger import config_cache  # noqa: F401
