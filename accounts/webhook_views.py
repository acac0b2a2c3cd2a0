"""The webhooks page: a researcher's own hooks and those of the projects they lead."""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accounts.errors import NotAllowed, Refused
from accounts.models import Project, User, Webhook
from accounts.permissions import led_project_ids
from accounts.views import _user
from accounts.webhooks import (
    webhook_create,
    webhook_delete,
    webhook_test_send,
    webhooks_listed,
    webhooks_of,
)

MINE = ""


class WebhookForm(forms.Form):
    owner = forms.ChoiceField(label=gettext_lazy("For"), required=False)
    url = forms.CharField(label=gettext_lazy("URL"), max_length=500)
    events = forms.MultipleChoiceField(
        label=gettext_lazy("Events"),
        choices=Webhook.Event.choices,
        widget=forms.CheckboxSelectMultiple,
        help_text=gettext_lazy("Your own hook hears only of your jobs ending."),
    )
    format = forms.ChoiceField(
        label=gettext_lazy("Format"), choices=Webhook.Format.choices, initial="json"
    )

    def __init__(self, *args: object, projects: list[Project], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.projects = {project.slug: project for project in projects}
        owner = self.fields["owner"]
        assert isinstance(owner, forms.ChoiceField)
        owner.choices = [(MINE, _("My jobs"))] + [(p.slug, p.name) for p in projects]


@login_required
@never_cache
def webhooks_page(request: HttpRequest) -> HttpResponse:
    """List the hooks; a new one's secret is shown on this page once, never again."""
    user: User = _user(request)
    projects = list(Project.objects.filter(pk__in=led_project_ids(user)).order_by("name"))
    form = WebhookForm(request.POST or None, projects=projects, initial={"events": ["job.ended"]})
    created = None
    if request.method == "POST" and form.is_valid():
        try:
            hook, secret = webhook_create(
                actor=user,
                url=form.cleaned_data["url"],
                events=form.cleaned_data["events"],
                format=form.cleaned_data["format"],
                project=form.projects.get(form.cleaned_data["owner"] or MINE),
            )
        except (Refused, NotAllowed) as refusal:
            form.add_error(None, str(refusal))
        else:
            created = {"hook": hook, "secret": secret}
            form = WebhookForm(projects=projects, initial={"events": ["job.ended"]})
    context = {"form": form, "created": created, "hooks": list(webhooks_listed(user))}
    return render(request, "accounts/webhooks.html", context, status=400 if form.errors else 200)


def _hook_or_404(request: HttpRequest, hook_id: int) -> Webhook:
    hook = webhooks_of(_user(request)).filter(pk=hook_id).first()
    if hook is None:
        raise Http404("No such webhook")
    return hook


@login_required
@require_POST
def webhook_delete_view(request: HttpRequest, hook_id: int) -> HttpResponse:
    hook = _hook_or_404(request, hook_id)
    webhook_delete(webhook=hook)
    messages.success(request, _("Webhook to %(url)s deleted.") % {"url": hook.url})
    return redirect("webhooks")


@login_required
@require_POST
def webhook_test_view(request: HttpRequest, hook_id: int) -> HttpResponse:
    hook = _hook_or_404(request, hook_id)
    webhook_test_send(webhook=hook)
    messages.success(
        request,
        _("A test delivery to %(url)s is on its way: reload to see how it went.")
        % {"url": hook.url},
    )
    return redirect("webhooks")
