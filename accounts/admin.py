from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin

from accounts.models import Allocation, Membership, Project, User


@admin.register(User)
class UserAdmin(DjangoUserAdmin):
    list_display = ["username", "posix_username", "email", "is_staff", "is_active"]
    search_fields = ["username", "posix_username", "email", "first_name", "last_name"]
    fieldsets = (
        *(DjangoUserAdmin.fieldsets or ()),
        ("Slurm", {"fields": ["posix_username"]}),
    )


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    raw_id_fields = ["user"]


class AllocationInline(admin.TabularInline):
    model = Allocation
    extra = 0
    fields = ["cluster", "state", "starts_on", "ends_on", "granted_gpu_seconds"]
    readonly_fields = ["cluster", "state", "starts_on", "ends_on", "granted_gpu_seconds"]
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "slurm_account", "created_at"]
    search_fields = ["name", "slug", "slurm_account"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline, AllocationInline]


@admin.register(Allocation)
class AllocationAdmin(admin.ModelAdmin):
    list_display = ["project", "cluster", "state", "starts_on", "ends_on", "granted_gpu_hours"]
    list_filter = ["state", "cluster"]
    list_select_related = ["project", "cluster"]
    search_fields = ["project__name", "project__slug"]
    raw_id_fields = ["project"]
