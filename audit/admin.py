"""The audit trail in the admin: read-only, filtered by what changed, who and from where."""

import json

from django.contrib import admin
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from audit.models import AuditRecord
from llmops.admin import ReadOnlyAdmin


def _shown(value: object) -> str:
    """A value as the trail keeps it: text as it is, anything else (null, numbers, lists) as
    JSON, so that an empty value and a missing one look different."""
    return value if isinstance(value, str) else json.dumps(value)


@admin.register(AuditRecord)
class AuditRecordAdmin(ReadOnlyAdmin):
    list_display = ["at", "actor", "source", "action", "target_type", "target", "changed"]
    list_filter = ["target_type", "action", "source", "at"]
    search_fields = ["actor", "target", "target_id", "where"]
    date_hierarchy = "at"
    fields = (
        "at",
        "source",
        "actor",
        "actor_user_id",
        "actor_api_key_id",
        "where",
        "action",
        "target_type",
        "target_id",
        "target",
        "changes_table",
    )
    readonly_fields = fields

    @admin.display(description="fields")
    def changed(self, record: AuditRecord) -> str:
        return ", ".join(record.changes)

    @admin.display(description="changes (before -> after)")
    def changes_table(self, record: AuditRecord) -> SafeString:
        rows = format_html_join(
            "",
            "<tr><th>{}</th><td>{}</td><td>{}</td></tr>",
            (
                (name, _shown(before), _shown(after))
                for name, (before, after) in record.changes.items()
            ),
        )
        return format_html(
            "<table><tr><th>field</th><th>before</th><th>after</th></tr>{}</table>", rows
        )
