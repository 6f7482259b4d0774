"""The content types of FailureRecord and BulkRequeue move from app label ``alerts`` to ``dlq``,
with their permissions: a group or user granted ``alerts.requeue_failurerecord`` now holds
``dlq.requeue_failurerecord``, and the admin's history keeps pointing at the same rows.

On a fresh database there is nothing to move yet (content types are created after migrate).
"""

from django.db import migrations

MODELS = ("failurerecord", "bulkrequeue")


def _move(apps, schema_editor, *, source: str, target: str) -> None:  # type: ignore[no-untyped-def]
    content_types = apps.get_model("contenttypes", "ContentType").objects.using(
        schema_editor.connection.alias
    )
    permissions = apps.get_model("auth", "Permission").objects.using(
        schema_editor.connection.alias
    )
    for model in MODELS:
        old = content_types.filter(app_label=source, model=model).first()
        if old is None:
            continue
        new = content_types.filter(app_label=target, model=model).first()
        if new is None:
            old.app_label = target
            old.save(update_fields=["app_label"])
            continue
        # Both exist (a migrate that stopped after creating the new ones): the grants of the
        # old permissions go to the new ones, then the old content type goes with its own.
        for permission in permissions.filter(content_type=old):
            moved, _ = permissions.get_or_create(
                content_type=new, codename=permission.codename, defaults={"name": permission.name}
            )
            for group in permission.group_set.all():
                group.permissions.add(moved)
            for user in permission.user_set.all():
                user.user_permissions.add(moved)
        old.delete()


def forwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    _move(apps, schema_editor, source="alerts", target="dlq")


def backwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    _move(apps, schema_editor, source="dlq", target="alerts")


class Migration(migrations.Migration):
    dependencies = [
        ("dlq", "0001_initial"),
        ("alerts", "0006_dlq_moved_out"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
