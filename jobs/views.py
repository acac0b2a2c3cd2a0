"""The researcher's job pages: list, composer with a live preview, job page, actions.

Views are thin: they parse a form, call a service or a selector and render.
Partials (``*_partial``) answer htmx requests for the parts that refresh live.
"""

from typing import cast

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import BadRequest
from django.core.paginator import Paginator
from django.core.validators import slug_re
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from accounts.errors import NotAllowed, QuotaExceeded
from accounts.models import User
from accounts.permissions import membership_of
from accounts.selectors import project_balance, projects_of
from clusters.selectors import partition_pending_jobs, partitions_enabled
from jobs import selectors, services
from jobs.actions import ACTIONS
from jobs.efficiency import job_efficiency
from jobs.errors import JobInvalid, OutputUnavailable
from jobs.forms import JobForm, SaveTemplateForm, initial_from_job, initial_from_template
from jobs.models import UNFINISHED_STATES, Job, JobTemplate
from jobs.requests import TEMPLATE_DEFAULT_FIELDS
from jobs.states import TERMINAL_STATES, JobState

PAGE_SIZE = 25
OUTPUT_TAIL_LINES = 200


def _user(request: HttpRequest) -> User:
    return cast(User, request.user)  # every view here is login_required


def _job(request: HttpRequest, job_id: int) -> Job:
    try:
        return selectors.job_detail(_user(request), job_id)
    except Job.DoesNotExist:
        raise Http404("No such job") from None


# No row id has more digits than a bigint; longer numbers name nothing.
_MAX_ID_DIGITS = 19


def _id_in_query(request: HttpRequest, name: str) -> int | None:
    """The id in query parameter ``name`` (None when absent); a 400 when it is not a
    number, a 404 when it is one no row can have."""
    value = request.GET.get(name, "")
    if not value:
        return None
    if not (value.isascii() and value.isdigit()):
        raise BadRequest(f"?{name}= takes a number")
    if len(value.lstrip("0")) > _MAX_ID_DIGITS:
        raise Http404(f"No such {name}")
    return int(value)


# --- the list -------------------------------------------------------------------


def _filtered_jobs(request: HttpRequest):
    user = _user(request)
    state = request.GET.get("state", "")
    project = request.GET.get("project", "")
    if not slug_re.fullmatch(project):
        project = ""  # not a slug, so no project's: ignored
    text = request.GET.get("q", "").strip()
    states: list[str] = []
    if state == "active":
        states = UNFINISHED_STATES
    elif state in JobState.values:
        states = [state]
    # My own jobs, unless a project is chosen: then a PI sees all of its jobs.
    membership = membership_of(user, project) if project else None
    project_id = membership.project_id if membership else None
    jobs = selectors.jobs_matching(user, project_id=project_id, states=states, search=text)
    if project and project_id is None:
        jobs = jobs.filter(project__slug=project)  # not a member: only my own jobs there
    return jobs, {"state": state, "project": project, "q": text}


@login_required
@require_GET
def job_list(request: HttpRequest) -> HttpResponse:
    jobs, filters = _filtered_jobs(request)
    page = Paginator(jobs, PAGE_SIZE).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "jobs": list(page.object_list),
        "filters": filters,
        "states": JobState.choices,
        "projects": projects_of(_user(request)),
        "query": request.GET.urlencode(),
    }
    context["live"] = any(
        job.state not in TERMINAL_STATES
        or (job.slurm_job_id is not None and job.used_gpu_seconds is None)
        for job in context["jobs"]
    )
    template = "jobs/_job_rows.html" if request.headers.get("HX-Request") else "jobs/list.html"
    return render(request, template, context)


# --- the composer -----------------------------------------------------------------


def _form(request: HttpRequest, data=None, initial=None) -> JobForm:
    user = _user(request)
    return JobForm(
        data,
        initial=initial,
        projects=list(projects_of(user)),
        partitions=list(partitions_enabled()),
        templates=list(selectors.templates_for(user)),
    )


def _initial(request: HttpRequest) -> dict:
    user = _user(request)
    initial: dict = {"name": "job", "nodes": 1, "gpus_per_node": 1, "time_limit_minutes": 60}
    if (template_id := _id_in_query(request, "template")) is not None:
        template = selectors.templates_for(user).filter(pk=template_id).first()
        if template is None:
            raise Http404("No such template")
        initial.update(initial_from_template(template))
    if (job_id := _id_in_query(request, "from")) is not None:
        initial.update(initial_from_job(_job(request, job_id)))
    if project := request.GET.get("project"):
        initial["project"] = project
    return initial


@login_required
def job_new(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        form = _form(request, initial=_initial(request))
        return render(request, "jobs/new.html", {"form": form})
    form = _form(request, request.POST)
    quota = None
    if form.is_valid():
        try:
            job = services.job_create(user=_user(request), request=form.job_request())
        except JobInvalid as error:
            form.add_service_errors(error)
        except QuotaExceeded as error:
            quota = error
        else:
            messages.success(
                request, _("Job #%(id)s saved; it is being submitted.") % {"id": job.pk}
            )
            return redirect("jobs:detail", job_id=job.pk)
    return render(request, "jobs/new.html", {"form": form, "quota": quota}, status=400)


def _blank(request: HttpRequest, name: str) -> bool:
    return not request.POST.get(name, "").strip()


@login_required
@require_POST
def job_preview(request: HttpRequest) -> HttpResponse:
    """The live part of the composer: script, cost against the balance, expected start,
    and each field's error (swapped in beside the field). Saves nothing.

    Errors follow input: a field left blank is not marked (the preview says what it
    still needs; submitting marks it), and a blank script previews as a skeleton,
    so a new form shows its script and cost before anything was typed."""
    data = request.POST.copy()
    if _blank(request, "script"):
        data["script"] = _("# Your commands go here, e.g. python train.py") + "\n"
    form = _form(request, data)
    context: dict = {"form": form}
    if form.is_valid():
        try:
            context["estimate"] = services.job_estimate(
                user=_user(request), request=form.job_request()
            )
        except JobInvalid as error:
            form.add_service_errors(error)
        partition = form.partitions.get(form.cleaned_data.get("partition", ""))
        context["partition"] = partition
    missing = [
        name
        for name in list(form.errors)
        if name in form.fields and form.fields[name].required and _blank(request, name)
    ]
    for name in missing:
        del form.errors[name]
    context["missing"] = [form.fields[name].label for name in missing]
    return render(request, "jobs/_preview.html", context)


@login_required
@require_POST
def template_save(request: HttpRequest) -> HttpResponse:
    form = _form(request, request.POST)
    save = SaveTemplateForm(request.POST)
    if not (form.is_valid() and save.is_valid()):
        messages.error(request, _("Fill in the job form and a template name to save it."))
        return render(request, "jobs/new.html", {"form": form, "save_form": save}, status=400)
    job_request = form.job_request()
    defaults = {
        field: getattr(job_request, field)
        for field in TEMPLATE_DEFAULT_FIELDS
        if getattr(job_request, field) not in (None, "", {})
    }
    project = None
    if save.cleaned_data["share_with_project"]:
        membership = membership_of(_user(request), form.cleaned_data["project"])
        project = membership.project if membership else None
    try:
        template = services.job_template_create(
            user=_user(request),
            name=save.cleaned_data["title"],
            script=job_request.script or "",
            defaults=defaults,
            scope=JobTemplate.Scope.PROJECT if project else JobTemplate.Scope.USER,
            project=project,
        )
    except (JobInvalid, NotAllowed) as error:
        messages.error(request, str(error))
        return render(request, "jobs/new.html", {"form": form, "save_form": save}, status=400)
    messages.success(request, _("Template “%(name)s” saved.") % {"name": template.name})
    return redirect(f"{reverse('jobs:new')}?template={template.pk}")


# --- one job ----------------------------------------------------------------------


def _job_context(request: HttpRequest, job: Job) -> dict:
    user = _user(request)
    can_manage = services.can_manage(user, job)
    return {
        "job": job,
        "events": list(job.events.all()),
        # Until accounting has charged it, an ended job still has its exit code and
        # charge to come: the page keeps refreshing.
        "live": job.state not in TERMINAL_STATES
        or (job.slurm_job_id is not None and job.used_gpu_seconds is None),
        "can_cancel": can_manage and job.state not in TERMINAL_STATES,
        "can_hold": can_manage and job.state == JobState.PENDING,
        "can_release": can_manage and job.state == JobState.PENDING,
        "balance": project_balance(job.project, cluster=job.cluster),
        "queue_depth": partition_pending_jobs(job.cluster_id, job.partition.name)
        if job.state == JobState.PENDING and job.queue_place
        else None,
        "efficiency": job_efficiency(job),
    }


@login_required
@require_GET
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _job(request, job_id)
    return render(request, "jobs/detail.html", _job_context(request, job))


@login_required
@require_GET
def job_status_partial(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _job(request, job_id)
    return render(request, "jobs/_status.html", _job_context(request, job))


@login_required
@require_GET
def job_output_partial(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _job(request, job_id)
    stream = "stderr" if request.GET.get("stream") == "stderr" else "stdout"
    context: dict = {"job": job, "stream": stream, "live": job.state not in TERMINAL_STATES}
    try:
        context["output"] = selectors.job_output(job, stream=stream, tail_lines=OUTPUT_TAIL_LINES)
    except OutputUnavailable as error:
        context["unavailable"] = str(error)
    return render(request, "jobs/_output.html", context)


@login_required
@require_POST
def job_action(request: HttpRequest, job_id: int, action: str) -> HttpResponse:
    job = _job(request, job_id)
    if action not in ACTIONS:
        raise Http404("No such action")
    try:
        services.job_act(user=_user(request), job=job, action=action)
    except (JobInvalid, NotAllowed) as error:
        messages.error(request, str(error))
    else:
        messages.success(request, ACTIONS[action].asked % {"id": job.pk})
    next_url = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(next_url, allowed_hosts={request.get_host()}):
        return redirect(next_url)
    return redirect("jobs:detail", job_id=job.pk)
