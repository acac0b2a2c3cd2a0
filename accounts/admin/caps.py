"""Members' GPU-hour caps in the console: allocation managers set, change and lift them
through ``accounts.caps`` (audited), as a project's PI does on the project's page."""

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest

from accounts.admin.common import hours
from accounts.caps import MAX_CAP_GPU_HOURS, member_cap_clear, member_cap_set, member_use
from accounts.errors import NotAllowed, Refused
from accounts.models import MemberCap


class MemberCapForm(forms.ModelForm):
    gpu_hours = forms.FloatField(min_value=0, max_value=MAX_CAP_GPU_HOURS, label="Cap (GPU-hours)")

    class Meta:
        model = MemberCap
        fields = ["allocation", "user"]
        help_texts = {"user": "Empty: the default cap of every member of the allocation."}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["gpu_hours"].initial = self.instance.gpu_hours


@admin.register(MemberCap)
class MemberCapAdmin(admin.ModelAdmin):
    form = MemberCapForm
    list_display = ["allocation", "member", "cap_hours", "used_hours", "set_by", "updated_at"]
    list_filter = ["allocation__cluster"]
    list_select_related = ["allocation__project", "allocation__cluster", "user", "set_by"]
    search_fields = ["allocation__project__slug", "allocation__project__name", "user__username"]
    raw_id_fields = ["allocation", "user"]

    def get_readonly_fields(self, request: HttpRequest, obj: MemberCap | None = None) -> Any:
        # A cap is of one member on one allocation: another member's is another cap.
        return ["allocation", "user"] if obj else []

    @admin.display(description="member")
    def member(self, cap: MemberCap) -> str:
        return cap.user.get_username() if cap.user else "every member (default)"

    @admin.display(description="cap (GPU-h)")
    def cap_hours(self, cap: MemberCap) -> str:
        return hours(cap.gpu_seconds)

    @admin.display(description="used + held (GPU-h)")
    def used_hours(self, cap: MemberCap) -> str:
        if cap.user_id is None:
            return "—"
        return hours(member_use(cap.allocation_id, cap.user_id))

    def save_model(self, request: HttpRequest, obj: MemberCap, form: Any, change: bool) -> None:
        try:
            saved = member_cap_set(
                actor=request.user,  # type: ignore[arg-type]
                allocation=obj.allocation,
                user=obj.user,
                gpu_hours=form.cleaned_data["gpu_hours"],
            )
        except NotAllowed as refusal:
            raise PermissionDenied(str(refusal)) from None
        except Refused as refusal:
            raise ValidationError(str(refusal)) from None
        obj.pk, obj.gpu_seconds = saved.pk, saved.gpu_seconds

    def delete_model(self, request: HttpRequest, obj: MemberCap) -> None:
        member_cap_clear(actor=request.user, allocation=obj.allocation, user=obj.user)  # type: ignore[arg-type]

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for cap in queryset.select_related("allocation", "user"):
            self.delete_model(request, cap)
