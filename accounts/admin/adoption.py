"""The console's Slurm import: what each cluster already has in Slurm (as a worker last
listed it) and adopting an account made by hand into a project."""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import path
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from kombu.exceptions import OperationalError

from accounts.adoption import account_adopt, listed_account
from accounts.errors import Refused
from accounts.models import AdoptedAccount, Project, User
from accounts.selectors import ListedAccount, account_listings
from accounts.tasks import account_listing_task
from clusters.models import Cluster


class AdoptForm(forms.Form):
    """Into the project of the account's name when there is one, else a new project."""

    slug = forms.SlugField(max_length=40, label=gettext_lazy("New project's slug"))
    name = forms.CharField(max_length=200, label=gettext_lazy("New project's name"))
    pi = forms.CharField(
        max_length=150,
        required=False,
        label=gettext_lazy("PI's user name"),
        help_text=gettext_lazy("The portal user who leads the new project (optional)."),
    )
    remove_other_users = forms.BooleanField(
        required=False,
        label=gettext_lazy("Remove the users listed above who are not the project's members"),
        help_text=gettext_lazy(
            "Unticked, the reconciler adds the project's members and keeps the users the "
            "site gave the account; ticked, it removes their associations with it."
        ),
    )

    def __init__(self, *args, project: Project | None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.project = project
        if project is not None:  # it is adopted into that one: nothing new to name
            for name in ("slug", "name", "pi"):
                del self.fields[name]

    def clean_pi(self) -> User | None:
        username = self.cleaned_data["pi"].strip()
        if not username:
            return None
        user = User.objects.filter(username=username, is_active=True).first()
        if user is None:
            raise forms.ValidationError(_("No active user has that user name."))
        return user


@admin.register(AdoptedAccount)
class AdoptedAccountAdmin(admin.ModelAdmin):
    """The adoptions, read-only (written by the import page's adopt form and by
    ``manage.py import_accounts``, never changed); the import page itself."""

    list_display = ["account", "cluster", "project", "adopted_by", "adopted_at"]
    list_filter = ["cluster", "remove_other_users"]
    list_select_related = ["cluster", "project", "adopted_by"]
    search_fields = ["account", "project__slug", "project__name"]
    readonly_fields = [
        "cluster",
        "account",
        "project",
        "adopted_by",
        "adopted_at",
        "remove_other_users",
        "kept_users",
    ]

    def may_adopt(self, request) -> bool:
        return super().has_add_permission(request)

    def has_add_permission(self, request):
        return False  # adopted from the import page, which shows what it changes

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_urls(self):
        return [
            path(
                "slurm-import/",
                self.admin_site.admin_view(self.import_view),
                name="accounts_adoptedaccount_import",
            ),
            path(
                "slurm-import/<int:cluster_id>/<str:account>/",
                self.admin_site.admin_view(self.adopt_view),
                name="accounts_adoptedaccount_adopt",
            ),
            *super().get_urls(),
        ]

    def import_view(self, request):
        """Each cluster's accounts as a worker last listed them; the web tier asks Slurm
        nothing. A POST asks the workers to list them again."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            if not self.may_adopt(request):
                raise PermissionDenied
            self._queue_listing(request)
            return redirect("admin:accounts_adoptedaccount_import")
        context = {
            **self.admin_site.each_context(request),
            "title": _("Slurm import"),
            "listings": account_listings(),
            "may_adopt": self.may_adopt(request),
            "opts": self.model._meta,
        }
        return render(request, "admin/accounts/adoptedaccount/import.html", context)

    def _queue_listing(self, request) -> None:
        try:
            # No publish retries: a page must not hang on a broker that is down.
            account_listing_task.apply_async(retry=False)
        except OperationalError:
            self.message_user(
                request,
                _("The workers' queue does not answer; try again when it is back."),
                messages.ERROR,
            )
        else:
            self.message_user(
                request,
                _("The clusters' accounts will be listed again; reload this page in a minute."),
            )

    def adopt_view(self, request, cluster_id: int, account: str):
        if not self.may_adopt(request):
            raise PermissionDenied
        cluster = Cluster.objects.filter(pk=cluster_id).first()
        row = listed_account(cluster, account) if cluster is not None else None
        if cluster is None or row is None:
            raise Http404
        listed = ListedAccount(
            row, AdoptedAccount.objects.filter(cluster=cluster, account=account).first()
        )
        project = Project.objects.filter(slurm_account=account).first()
        form = AdoptForm(request.POST or None, project=project)
        if listed.adoptable and request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                adoption = account_adopt(
                    cluster=cluster,
                    account=account,
                    actor=request.user,
                    project=project,
                    new_project_slug=data.get("slug", ""),
                    new_project_name=data.get("name", ""),
                    pi=data.get("pi"),
                    remove_other_users=data["remove_other_users"],
                )
            except Refused as refused:
                form.add_error(None, str(refused))
            else:
                self.log_addition(request, adoption, "Adopted from the Slurm import page")
                self.message_user(
                    request,
                    _(
                        "%(account)s on %(cluster)s is adopted into %(project)s; the next "
                        "reconcile run manages it."
                    )
                    % {"account": account, "cluster": cluster.name, "project": adoption.project},
                )
                return redirect("admin:accounts_adoptedaccount_import")
        context = {
            **self.admin_site.each_context(request),
            "title": _("Adopt %(account)s on %(cluster)s")
            % {"account": account, "cluster": cluster.name},
            "cluster": cluster,
            "listed": listed,
            "project": project,
            "form": form,
            "opts": self.model._meta,
        }
        return render(request, "admin/accounts/adoptedaccount/adopt.html", context)
