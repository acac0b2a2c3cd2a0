"""The console's users and the notices the portal sent them."""

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin

from accounts.models import (
    ExternalIdentity,
    Notification,
    User,
)


class ExternalIdentityInline(admin.TabularInline):
    """Where the user signs in (read-only: written by accounts.identity at each sign-in)."""

    model = ExternalIdentity
    extra = 0
    fields = ["source", "login", "issuer", "subject", "last_sign_in_at"]
    readonly_fields = ["source", "login", "issuer", "subject", "last_sign_in_at"]
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(User)
class UserAdmin(DjangoUserAdmin):
    list_display = ["username", "posix_username", "email", "is_staff", "is_active"]
    search_fields = ["username", "posix_username", "email", "first_name", "last_name"]
    fieldsets = (
        *(DjangoUserAdmin.fieldsets or ()),
        # A user who signs in through the directory or the provider gets their Unix login
        # from there at every sign-in; set by hand only for local accounts.
        ("Slurm", {"fields": ["posix_username", "directory_disabled_at"]}),
    )
    readonly_fields = ["directory_disabled_at"]
    inlines = [ExternalIdentityInline]


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
