"""The audit log in the admin console: read-only, for allocation managers (view permission)."""

import json

from django.contrib import admin
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from audit.models import AuditEvent

EVENT_FIELDS = (
    "at",
    "actor",
    "action",
    "target_type",
    "target_id",
    "target_repr",
    "on_behalf_of",
    "scope",
    "detail_text",
)


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["at", "actor", "action", "target_repr", "on_behalf_of", "scope", "summary"]
    list_filter = ["action", "at"]
    list_select_related = ["actor", "on_behalf_of"]
    search_fields = [
        "actor__username",
        "on_behalf_of__username",
        "target_repr",
        "=target_id",
        "scope",
    ]
    date_hierarchy = "at"
    fields = readonly_fields = EVENT_FIELDS
    show_full_result_count = False  # the log only grows: no COUNT(*) on every page

    @admin.display(description=_("detail"))
    def summary(self, event: AuditEvent) -> str:
        return ", ".join(f"{key}: {value}" for key, value in event.detail.items())[:200]

    @admin.display(description=_("detail"))
    def detail_text(self, event: AuditEvent) -> str:
        return json.dumps(event.detail, ensure_ascii=False, indent=2, sort_keys=True)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False
