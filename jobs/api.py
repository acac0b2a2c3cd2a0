"""REST API of jobs: create (idempotently), estimate, list, show, cancel/hold/release,
read output; and job templates.

The shapes are in jobs/serializers.py; every rule about what a job may ask for is the
services' (jobs.requests.job_prepare), whose JobInvalid the exception handler turns
into a 400 naming the fields.
"""

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, status
from rest_framework.generics import ListAPIView
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api_support import Conflict, caller, member_project, query
from accounts.models import User
from jobs import selectors
from jobs.idempotency import IdempotencyConflict, job_create_once
from jobs.models import Job, JobTemplate
from jobs.selectors import job_detail, job_output, templates_for
from jobs.serializers import (
    JOB_REQUEST_EXAMPLE,
    LISTED_ROW,
    EstimateSerializer,
    JobDetailSerializer,
    JobListItemSerializer,
    JobListQuerySerializer,
    JobRequestSerializer,
    OutputQuerySerializer,
    OutputSerializer,
    TemplateCreateSerializer,
    TemplateSerializer,
    job_list_items,
    job_shown,
)
from jobs.services import (
    job_act,
    job_create,
    job_estimate,
    job_template_create,
)

INT32 = 2**31 - 1
INT64 = 2**63 - 1


# Job lists: 100,000 jobs of one user page by (created_at, id), never by OFFSET.


class JobPagination(CursorPagination):
    ordering = ("-created_at", "-id")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200

    def decode_cursor(self, request):
        try:
            return super().decode_cursor(request)
        except exceptions.NotFound:
            raise exceptions.ValidationError(
                {"cursor": ["This cursor is not one the API gave out; follow the next link."]}
            ) from None


def jobs_listed(
    user: User, *, project: str = "", states: list[str] | None = None, search: str = ""
) -> QuerySet[Job, dict[str, Any]]:
    """The rows of the caller's job list (their own jobs; with ``project``, that
    project's — all of them for its PI and co-PIs); a project not theirs is a 400."""
    project_id = member_project(user, project).pk if project else None
    return selectors.jobs_listed(
        user, project_id=project_id, states=states or (), search=search, columns=LISTED_ROW
    )


def _idempotency_key(request: Request) -> str:
    key = request.headers.get("Idempotency-Key", "")
    if key and not (len(key) <= 200 and all("!" <= char <= "~" for char in key)):
        raise exceptions.ValidationError(
            {"Idempotency-Key": ["Use 1 to 200 visible ASCII characters, e.g. a UUID."]}
        )
    return key


class JobList(ListAPIView):
    serializer_class = JobListItemSerializer
    pagination_class = JobPagination
    api_errors = {
        "get": {400: "invalid: an unknown state, a project that is not yours, or a bad cursor."},
        "post": {
            400: "invalid: `fields` names each field to fix (Slurm's limits, paths, script).",
            403: "permission_denied: your role does not allow this.",
            409: "quota_exceeded: the project cannot cover the job (with requested_gpu_hours "
            "and available_gpu_hours); idempotency_conflict: the key was used with another "
            "body.",
            503: None,
        },
    }

    def get_queryset(self) -> QuerySet[Job, dict[str, Any]]:
        params = query(JobListQuerySerializer, self.request)
        return jobs_listed(
            caller(self.request),
            project=params.get("project", ""),
            states=params.get("state"),
            search=params.get("search", ""),
        )

    @extend_schema(
        tags=["jobs"],
        summary="Your jobs, newest first; a PI or co-PI passing project= gets the project's",
        parameters=[JobListQuerySerializer],
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(job_list_items(page or []))

    @extend_schema(
        tags=["jobs"],
        summary="Create a job: checked, priced, its GPU-hours held, then submitted",
        description="With an `Idempotency-Key` header a repeat of the same body returns "
        "the first job (201 again, header `Idempotent-Replayed: true`); the same key with "
        "another body is refused with 409 `idempotency_conflict`.",
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                description="1 to 200 visible ASCII characters, e.g. a UUID.",
            )
        ],
        request=JobRequestSerializer,
        responses={201: JobDetailSerializer},
        examples=[JOB_REQUEST_EXAMPLE],
    )
    def post(self, request: Request) -> Response:
        serializer = JobRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        key = _idempotency_key(request)
        replayed = False
        if key:
            try:
                job, replayed = job_create_once(
                    user=caller(request),
                    key=key,
                    canonical=serializer.canonical(),
                    request=serializer.job_request(),
                )
            except IdempotencyConflict:
                raise Conflict(
                    "This Idempotency-Key was used with another request body; "
                    "use a new key for a new job.",
                    code="idempotency_conflict",
                ) from None
        else:
            job = job_create(user=caller(request), request=serializer.job_request())
        if replayed:
            job = job_detail(caller(request), job.pk)
        # Else just made: job_create gave it the objects and rows it was made with.
        response = Response(job_shown(job), status=status.HTTP_201_CREATED)
        if replayed:
            response["Idempotent-Replayed"] = "true"
        return response


class JobEstimate(APIView):
    api_errors = {
        "post": {
            400: "invalid: `fields` names each field to fix.",
            503: None,
        }
    }

    @extend_schema(
        tags=["jobs"],
        summary="What a job would cost and when it would start; saves nothing",
        request=JobRequestSerializer,
        responses=EstimateSerializer,
        examples=[JOB_REQUEST_EXAMPLE],
    )
    def post(self, request: Request) -> Response:
        serializer = JobRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        estimate = job_estimate(user=caller(request), request=serializer.job_request())
        return Response(EstimateSerializer(estimate).data)


def visible_job(user: User, pk: int) -> Job:
    try:
        return job_detail(user, pk)
    except Job.DoesNotExist:
        raise exceptions.NotFound(f"There is no job {pk} of yours.") from None


class JobDetail(APIView):
    @extend_schema(
        tags=["jobs"],
        summary="One job, with its timeline of events",
        responses=JobDetailSerializer,
    )
    def get(self, request: Request, pk: int) -> Response:
        return Response(job_shown(visible_job(caller(request), pk)))


class _JobAction(APIView):
    verb = ""
    api_errors = {
        "post": {
            400: "invalid: the job has already ended (or, to hold, is not pending).",
            403: "permission_denied: only the job's owner or the project's PI or co-PI.",
        }
    }

    def post(self, request: Request, pk: int) -> Response:
        job = visible_job(caller(request), pk)
        job_act(user=caller(request), job=job, action=self.verb)
        return Response(
            job_shown(visible_job(caller(request), pk)), status=status.HTTP_202_ACCEPTED
        )


class JobCancel(_JobAction):
    verb = "cancel"

    @extend_schema(
        tags=["jobs"],
        summary="Cancel a job: one not in Slurm yet ends now, one in Slurm is scancelled",
        request=None,
        responses={202: JobDetailSerializer},
    )
    def post(self, request: Request, pk: int) -> Response:
        return super().post(request, pk)


class JobHold(_JobAction):
    verb = "hold"

    @extend_schema(
        tags=["jobs"],
        summary="Hold a job pending in Slurm's queue",
        request=None,
        responses={202: JobDetailSerializer},
    )
    def post(self, request: Request, pk: int) -> Response:
        return super().post(request, pk)


class JobRelease(_JobAction):
    verb = "release"

    @extend_schema(
        tags=["jobs"],
        summary="Release a held job",
        request=None,
        responses={202: JobDetailSerializer},
    )
    def post(self, request: Request, pk: int) -> Response:
        return super().post(request, pk)


class JobOutput(APIView):
    api_errors = {
        "get": {
            400: "invalid: stream, tail or array_task is not valid.",
            404: "not_found: no such job of yours; output_unavailable: the job has not "
            "written the file yet, or the portal may not show it (the message says why).",
        }
    }

    @extend_schema(
        tags=["jobs"],
        summary="The end of a job's stdout or stderr",
        parameters=[OutputQuerySerializer],
        responses=OutputSerializer,
    )
    def get(self, request: Request, pk: int) -> Response:
        params = query(OutputQuerySerializer, request)
        job = visible_job(caller(request), pk)
        output = job_output(
            job,
            stream=params["stream"],
            tail_lines=params.get("tail"),
            array_task=params.get("array_task"),
        )
        return Response(OutputSerializer(output).data)


class TemplateList(APIView):
    api_errors = {
        "post": {
            403: "permission_denied: project templates are for the project's PI and co-PIs, "
            "global ones for allocation managers.",
        }
    }

    @extend_schema(
        tags=["templates"],
        summary="Templates you can use: yours, your projects', and global ones",
        responses=TemplateSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        templates = templates_for(caller(request)).select_related("owner", "project")
        return Response(TemplateSerializer(templates, many=True).data)

    @extend_schema(
        tags=["templates"],
        summary="Create a template: yours, shared with a project you lead, or global",
        request=TemplateCreateSerializer,
        responses={201: TemplateSerializer},
    )
    def post(self, request: Request) -> Response:
        serializer = TemplateCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        user = caller(request)
        project = None
        if data["scope"] == JobTemplate.Scope.PROJECT:
            if not data.get("project"):
                message = "Name the project to share it with."
                raise exceptions.ValidationError({"project": [message]})
            project = member_project(user, data["project"])  # another's project: 404
        template = job_template_create(
            user=user,
            name=data["name"],
            scope=data["scope"],
            project=project,
            defaults=data.get("defaults", {}),
            script=data["script"],
            description=data.get("description", ""),
        )
        return Response(TemplateSerializer(template).data, status=status.HTTP_201_CREATED)
