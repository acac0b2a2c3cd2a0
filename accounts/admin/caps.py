"""Members' GPU-hour caps in the console: allocation managers set, change and lift them
through ``accounts.caps`` (audited), as a project's PI does on the project's page. A
change the rules refuse (nobody changes their own cap: ``cap_change_refusal``) is
refused on the form, or by the lift, with the reason."""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest
from django.shortcuts import redirect

from accounts.admin.common import hours
from accounts.caps import (
    MAX_CAP_GPU_HOURS,
    cap_change_refusal_of,
    member_cap_clear,
    member_cap_set,
    member_use,
)
from accounts.errors import NotAllowed, Refused
from accounts.models import MemberCap, User


class MemberCapForm(forms.ModelForm):
    gpu_hours = forms.FloatField(min_value=0, max_value=MAX_CAP_GPU_HOURS, label="Cap (GPU-hours)")
    actor: User | None = None  # the console's user (MemberCapAdmin.get_form)

    class Meta:
        model = MemberCap
        fields = ["allocation", "user"]
        help_texts = {"user": "Empty: the default cap of every member of the allocation."}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["gpu_hours"].initial = self.instance.gpu_hours

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        allocation = cleaned.get("allocation") or getattr(self.instance, "allocation", None)
        gpu_hours = cleaned.get("gpu_hours")
        if self.actor is not None and allocation is not None and gpu_hours is not None:
            user = cleaned.get("user") if not self.instance.pk else self.instance.user
            refusal = cap_change_refusal_of(self.actor, allocation, user, round(gpu_hours * 3600))
            if refusal:
                raise ValidationError(refusal)
        return cleaned


@admin.register(MemberCap)
class MemberCapAdmin(admin.ModelAdmin):
    form = MemberCapForm
    list_display = ["allocation", "member", "cap_hours", "used_hours", "set_by", "updated_at"]
    list_filter = ["allocation__cluster"]
    list_select_related = ["allocation__project", "allocation__cluster", "user", "set_by"]
    search_fields = ["allocation__project__slug", "allocation__project__name", "user__username"]
    raw_id_fields = ["allocation", "user"]
    actions = ["lift"]

    def get_readonly_fields(self, request: HttpRequest, obj: MemberCap | None = None) -> Any:
        # A cap is of one member on one allocation: another member's is another cap.
        return ["allocation", "user"] if obj else []

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any):
        form = super().get_form(request, obj, change=change, **kwargs)
        return type(form.__name__, (form,), {"actor": request.user})

    def get_actions(self, request: HttpRequest) -> Any:
        actions = super().get_actions(request)
        # Lifting goes through the service, which reports each cap it may not lift.
        actions.pop("delete_selected", None)
        return actions

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

    def delete_view(self, request: HttpRequest, object_id: str, extra_context: Any = None):
        cap = self.get_object(request, object_id)
        if cap is not None:
            refusal = cap_change_refusal_of(request.user, cap.allocation, cap.user, None)  # type: ignore[arg-type]
            if refusal:
                self.message_user(request, f"{cap}: {refusal}", messages.ERROR)
                return redirect("admin:accounts_membercap_change", cap.pk)
        return super().delete_view(request, object_id, extra_context)

    def delete_model(self, request: HttpRequest, obj: MemberCap) -> None:
        member_cap_clear(actor=request.user, allocation=obj.allocation, user=obj.user)  # type: ignore[arg-type]

    @admin.action(description="Lift the selected caps", permissions=["delete"])
    def lift(self, request: HttpRequest, queryset: Any) -> None:
        for cap in queryset.select_related("allocation__project", "allocation__cluster", "user"):
            try:
                member_cap_clear(actor=request.user, allocation=cap.allocation, user=cap.user)  # type: ignore[arg-type]
            except NotAllowed as refusal:
                self.message_user(request, f"{cap}: {refusal}", messages.ERROR)
            else:
                self.message_user(request, f"{cap}: lifted.")
