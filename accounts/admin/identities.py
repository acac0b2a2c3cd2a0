"""Sign-ins linked to accounts by hand in the console: the accounts a sign-in never takes
by itself (staff, superusers, allocation managers, one another identity of the same
source signs in to: ``accounts.identity.why_not_linked``). An allocation manager adds
the link through ``identity_link`` (audited); the refused sign-in's log line names the
subject to link."""

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest

from accounts.errors import NotAllowed
from accounts.identity import identity_link, may_link
from accounts.models import ExternalIdentity, User
from accounts.permissions import is_allocation_manager


class IdentityLinkForm(forms.ModelForm):
    actor: User  # who links: set by ExternalIdentityAdmin.get_form

    class Meta:
        model = ExternalIdentity
        fields = ["user", "source", "issuer", "subject", "login"]
        help_texts = {
            "issuer": "The provider's issuer, or the directory's URL.",
            "subject": "The provider's sub, or the directory entry's DN: the refused sign-in's "
            "line in the portal's log names it.",
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "issuer" in self.fields:  # the add page (a link is only ever viewed after)
            self.fields["issuer"].initial = settings.OIDC_ISSUER or settings.LDAP_URL
            self.fields["login"].required = False

    def clean(self) -> dict[str, Any]:
        super().clean()
        if user := self.cleaned_data.get("user"):
            try:
                may_link(actor=self.actor, user=user)
            except NotAllowed as refusal:
                raise forms.ValidationError(str(refusal)) from None
        return self.cleaned_data


@admin.register(ExternalIdentity)
class ExternalIdentityAdmin(admin.ModelAdmin):
    """Listed for allocation managers, added through ``identity_link``; never changed by
    hand (each sign-in updates its own)."""

    form = IdentityLinkForm
    list_display = ["user", "source", "login", "issuer", "subject", "last_sign_in_at"]
    list_filter = ["source"]
    list_select_related = ["user"]
    search_fields = ["user__username", "login", "subject"]
    raw_id_fields = ["user"]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_allocation_manager(request.user)  # type: ignore[arg-type]

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_allocation_manager(request.user)  # type: ignore[arg-type]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return is_allocation_manager(request.user)  # type: ignore[arg-type]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any):
        form = super().get_form(request, obj, change, **kwargs)
        return type(form.__name__, (form,), {"actor": request.user})

    def save_model(
        self, request: HttpRequest, obj: ExternalIdentity, form: Any, change: bool
    ) -> None:
        linked = identity_link(
            actor=request.user,  # type: ignore[arg-type]
            user=obj.user,
            source=obj.source,
            subject=obj.subject,
            issuer=obj.issuer,
            login=obj.login,
        )
        obj.pk = linked.pk
