"""Every DRF ``authtoken`` token becomes an API key with every scope, stored hashed, and the
plaintext rows are deleted: the same secret keeps working (``Token <key>`` and ``Bearer
<key>``), and the database no longer holds it.

``rest_framework.authtoken`` is no longer installed, so its table is read with SQL when it is
there (a database from before keys) and left alone when it is not (a new one). The emptied
table stays; it may be dropped by hand (docs/operations.md#api-keys)."""

from django.db import migrations

TABLE = "authtoken_token"
ALL_SCOPES = ["jobs:read", "jobs:write", "costs:read", "admin"]
"""The scopes as this migration was written: a later scope is not given to old tokens."""


def import_drf_tokens(apps, schema_editor):  # type: ignore[no-untyped-def]
    from keys.hashing import display_prefix, secret_hash

    connection = schema_editor.connection
    if TABLE not in connection.introspection.table_names():
        return
    ApiKey = apps.get_model("keys", "ApiKey")
    ApiKeySecret = apps.get_model("keys", "ApiKeySecret")
    quote = schema_editor.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {quote('key')}, {quote('user_id')} FROM {quote(TABLE)}")
        tokens = cursor.fetchall()
    for secret, user_id in tokens:
        key = ApiKey.objects.create(
            user_id=user_id,
            name="migrated token",
            prefix=display_prefix(secret),
            scopes=list(ALL_SCOPES),
        )
        ApiKeySecret.objects.create(
            key=key, secret_hash=secret_hash(secret), prefix=display_prefix(secret)
        )
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {quote(TABLE)}")


class Migration(migrations.Migration):
    dependencies = [("keys", "0001_api_keys")]

    operations = [migrations.RunPython(import_drf_tokens, migrations.RunPython.noop)]
