"""The console's users and the notices the portal sent them."""

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin

from accounts.models import (
    Notification,
    User,
)


@admin.register(User)
class UserAdmin(DjangoUserAdmin):
    list_display = ["username", "posix_username", "email", "is_staff", "is_active"]
    search_fields = ["username", "posix_username", "email", "first_name", "last_name"]
    fieldsets = (
        *(DjangoUserAdmin.fieldsets or ()),
        ("Slurm", {"fields": ["posix_username"]}),
    )


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    """What was mailed to PIs and co-PIs, read-only: written by accounts.notifications."""

    list_display = ["allocation", "kind", "claimed_at", "sent_at", "recipients"]
    list_filter = ["kind"]
    list_select_related = ["allocation__project", "allocation__cluster"]
    search_fields = ["allocation__project__slug", "recipients"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
