"""The API's one error shape, and the one place that turns errors into it.

Every refusal is ``{"error": {"code": "...", "message": "...", "fields": {...}}}``:
``code`` is stable (scripts branch on it), ``message`` is for people, and
``fields`` maps a request field to its messages (``"__all__"`` for the ones that
concern no single field; nested fields are dotted, ``environment.PATH``).
Domain errors of the services map to their status here; an exception that is
none of these stays a 500, so a bug is never passed off as a refusal.
"""

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import Direction, OpenApiResponse
from rest_framework import exceptions, serializers
from rest_framework.response import Response
from rest_framework.views import exception_handler

from accounts.errors import (
    AllocationOverlap,
    AlreadyDecided,
    NoActiveAllocation,
    NotAllowed,
    QuotaExceeded,
    Refused,
    TooManyTokens,
)
from clusters.slurm.errors import SlurmRejected, SlurmUnavailable
from jobs.errors import JobInvalid, OutputUnavailable

ALL = "__all__"


class ApiError(exceptions.APIException):
    """A refusal with a status, a code and a message of our choosing."""

    def __init__(
        self,
        status_code: int,
        code: str,
        message: str,
        *,
        fields: Mapping[str, list[str]] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message, code)
        self.status_code = status_code
        self.code = code
        self.message = message
        self.fields = dict(fields or {})
        self.extra = dict(extra or {})


def invalid(fields: Mapping[str, list[str]], message: str = "") -> ApiError:
    return ApiError(
        400,
        "invalid",
        message or "The request is not valid; see fields for what to fix.",
        fields=fields,
    )


def flatten(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error details as {"field": [...], "environment.PATH": [...]}."""
    if isinstance(detail, Mapping):
        flat: dict[str, list[str]] = {}
        for key, value in detail.items():
            name = ALL if key in ("non_field_errors", NON_FIELD_ERRORS) else str(key)
            for field, messages in flatten(value, f"{prefix}.{name}" if prefix else name).items():
                flat.setdefault(field, []).extend(messages)
        return flat
    if isinstance(detail, list) and any(isinstance(item, Mapping | list) for item in detail):
        flat = {}
        for index, item in enumerate(detail):
            if item:
                flat.update(flatten(item, f"{prefix}.{index}" if prefix else str(index)))
        return flat
    messages = detail if isinstance(detail, list) else [detail]
    return {prefix or ALL: [str(message) for message in messages]}


def _from_domain(exc: Exception) -> ApiError | None:
    if isinstance(exc, JobInvalid):
        return invalid(exc.fields, "The job request is not valid; see fields for what to fix.")
    if isinstance(exc, QuotaExceeded):
        return ApiError(
            409,
            "quota_exceeded",
            str(exc),
            extra={
                "requested_gpu_hours": exc.requested_gpu_hours,
                "available_gpu_hours": exc.available_gpu_hours,
                # null when the member has no cap on the allocation
                "member_remaining_gpu_hours": exc.member_remaining_gpu_hours,
                "limited_by": exc.limited_by,
            },
        )
    if isinstance(exc, NotAllowed):
        return ApiError(403, "permission_denied", str(exc))
    if isinstance(exc, Refused):
        return invalid({ALL: [str(exc)]}, str(exc))
    if isinstance(exc, AlreadyDecided):
        return ApiError(409, "already_decided", str(exc))
    if isinstance(exc, AllocationOverlap):
        return ApiError(409, "allocation_overlap", str(exc))
    if isinstance(exc, TooManyTokens):
        return ApiError(409, "too_many_tokens", str(exc), extra={"limit": exc.limit})
    if isinstance(exc, NoActiveAllocation):
        return ApiError(409, "no_active_allocation", str(exc))
    if isinstance(exc, OutputUnavailable):
        return ApiError(404, "output_unavailable", str(exc))
    if isinstance(exc, SlurmUnavailable):
        return ApiError(
            503, "slurm_unavailable", f"The cluster does not answer; try again soon ({exc})."
        )
    if isinstance(exc, SlurmRejected):
        return ApiError(409, "slurm_rejected", f"Slurm refused: {exc.message}")
    if isinstance(exc, DjangoValidationError):
        if hasattr(exc, "error_dict"):
            return invalid({field: list(messages) for field, messages in exc.message_dict.items()})
        return invalid({ALL: list(exc.messages)})
    return None


def _body(exc: exceptions.APIException) -> dict[str, Any]:
    if isinstance(exc, ApiError):
        return {"code": exc.code, "message": exc.message, "fields": exc.fields, **exc.extra}
    if isinstance(exc, exceptions.ValidationError):
        return {
            "code": "invalid",
            "message": "The request is not valid; see fields for what to fix.",
            "fields": flatten(exc.detail),
        }
    codes = exc.get_codes()
    return {
        "code": codes if isinstance(codes, str) else exc.default_code,
        "message": str(exc.detail),
        "fields": {},
    }


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    domain = _from_domain(exc)
    if domain is not None:
        exc = domain
    # DRF's own handler sets WWW-Authenticate (401) and Retry-After (429) and
    # turns Http404 and PermissionDenied into its exceptions; None means a 500.
    response = exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.APIException):
        response.data = {"error": _body(exc)}
    else:  # Django's Http404 or PermissionDenied, as DRF converted them
        code = "not_found" if response.status_code == 404 else "permission_denied"
        detail = response.data.get("detail", "") if isinstance(response.data, dict) else ""
        response.data = {"error": {"code": code, "message": str(detail), "fields": {}}}
    return response


# It changes nothing, so it needs no CSRF check: without the exemption a POST to an
# unknown address would get Django's HTML CSRF page instead of this 404.
@csrf_exempt
def api_not_found(request: HttpRequest, path: str = "") -> JsonResponse:
    """Any /api/ address that names no endpoint, in the error shape rather than a page."""
    hint = "" if request.path.endswith("/") else " API addresses end with a slash."
    return JsonResponse(
        {
            "error": {
                "code": "not_found",
                "message": f"There is no API endpoint at {request.path}.{hint}",
                "fields": {},
            }
        },
        status=404,
    )


# The error shape in the OpenAPI documentation.


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Stable, for scripts: invalid, not_found, …")
    message = serializers.CharField(help_text="For people: what went wrong and what to do.")
    # DRF's metaclass takes declared fields off the class, so this does not hide
    # Serializer.fields at run time; only the type checker sees a clash.
    fields = serializers.DictField(  # type: ignore[assignment]
        child=serializers.ListField(child=serializers.CharField()),
        help_text='Per-field messages ("__all__" for the whole request); empty when none.',
    )
    requested_gpu_hours = serializers.FloatField(
        required=False, help_text="quota_exceeded only: what the job needs."
    )
    available_gpu_hours = serializers.FloatField(
        required=False, help_text="quota_exceeded only: what the project has left."
    )
    member_remaining_gpu_hours = serializers.FloatField(
        required=False,
        allow_null=True,
        help_text="quota_exceeded only: what your cap on the allocation leaves you; "
        "null when you have no cap.",
    )
    limited_by = serializers.ChoiceField(
        choices=["project", "member_cap"],
        required=False,
        help_text="quota_exceeded only: what refused the job, the project's balance or your cap.",
    )
    limit = serializers.IntegerField(
        required=False, help_text="too_many_tokens only: how many live tokens a user may have."
    )


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()


GENERIC = {
    400: "invalid: a field or parameter is missing or wrong; `fields` says which and why.",
    401: "not_authenticated / authentication_failed: no credentials, or a token that is "
    "unknown, expired or revoked.",
    403: "permission_denied: your role does not allow this.",
    404: "not_found: no such object, or not one of yours.",
    409: "A conflict with the current state; the code says which.",
    429: "throttled: too many requests; retry after the Retry-After header's seconds.",
    503: "slurm_unavailable: the cluster did not answer; retry later.",
}


class ApiSchema(AutoSchema):
    """Documents the error responses of every operation in the one error shape.

    Each operation gets 401 and 429; one with a body 400; one on an object's
    path 404. A view adds its own as plain data, so the apps need not import
    this module: ``api_errors = {"post": {409: "quota_exceeded: …"}}``
    (a description of None takes the generic one).
    """

    def _error_statuses(self) -> dict[int, str]:
        method = self.method.lower()
        statuses: dict[int, str | None] = {401: None, 429: None}
        if method in ("post", "put", "patch"):
            statuses[400] = None
        if "{" in self.path:
            statuses[404] = None
        declared = getattr(self.view, "api_errors", {}).get(method, {})
        statuses.update(declared)
        return {code: text or GENERIC[code] for code, text in sorted(statuses.items())}

    def _get_response_bodies(self, direction: Direction = "response") -> dict[str, Any]:
        bodies = super()._get_response_bodies(direction)
        for code, description in self._error_statuses().items():
            bodies.setdefault(
                str(code),
                self._get_response_for_code(
                    OpenApiResponse(ErrorSerializer, description=description),
                    str(code),
                    direction=direction,
                ),
            )
        return bodies
