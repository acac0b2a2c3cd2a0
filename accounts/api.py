"""REST API of the bank: who am I, my projects and their balances and usage,
allocation requests, and personal access tokens."""

import datetime as dt
from collections.abc import Iterable
from typing import Any, cast

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import exceptions, serializers, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import tokens
from accounts.api_support import (
    Conflict,
    caller,
    cluster_named,
    member_project,
    not_found,
    query,
    related,
)
from accounts.models import (
    BALANCE_FIELDS,
    Allocation,
    AllocationRequest,
    Membership,
    PersonalAccessToken,
    User,
)
from accounts.permissions import is_allocation_manager, is_lead_role
from accounts.preferences import mail_language_choices, preferences_update
from accounts.requests import (
    allocation_request_approve,
    allocation_request_create,
    allocation_request_deny,
)
from accounts.selectors import (
    USAGE_GROUPS,
    Balance,
    allocation_balance,
    allocation_requests_for,
    is_in_force,
    memberships_of_user,
    project_usage,
)


def membership_or_404(user: User, slug: str) -> Membership:
    """The user's membership of the project ``slug``; NotFound (a 404) for anyone else's."""
    membership = memberships_of_user(user).filter(project__slug=slug).first()
    if membership is None:
        raise not_found(f"project {slug!r}")
    return membership


# Shapes.


class BalanceSerializer(serializers.Serializer):
    granted_gpu_hours = serializers.FloatField(help_text="Granted and adjusted.")
    used_gpu_hours = serializers.FloatField(help_text="Charged for work that ran.")
    held_gpu_hours = serializers.FloatField(help_text="Held by jobs that have not ended.")
    available_gpu_hours = serializers.FloatField(
        help_text="What new jobs can still use: granted, less used, held and lapsed."
    )


def balance_of(allocations: Iterable[Allocation]) -> dict[str, float]:
    """The project balance (accounts.selectors.project_balance) from rows already loaded:
    the sum over the allocations in force today."""
    today = timezone.localdate()
    active = [a for a in allocations if is_in_force(a, on=today)]
    totals = {field: sum(getattr(a, field) for a in active) for field in BALANCE_FIELDS}
    return Balance(**totals).as_gpu_hours()


class AllocationSerializer(serializers.ModelSerializer):
    cluster = related("name")
    in_force = serializers.SerializerMethodField(
        help_text="Whether it pays for work today: active and within its period. An active "
        "allocation whose period starts later is granted, not yet available (no job or "
        "Slurm limit uses it before starts_on)."
    )
    granted_gpu_hours = serializers.SerializerMethodField()
    used_gpu_hours = serializers.SerializerMethodField()
    held_gpu_hours = serializers.SerializerMethodField()
    available_gpu_hours = serializers.SerializerMethodField()

    class Meta:
        model = Allocation
        fields = [
            "id",
            "cluster",
            "state",
            "starts_on",
            "ends_on",
            "in_force",
            "granted_gpu_hours",
            "used_gpu_hours",
            "held_gpu_hours",
            "available_gpu_hours",
        ]

    def get_in_force(self, allocation: Allocation) -> bool:
        return is_in_force(allocation)

    def _hours(self, allocation: Allocation, name: str) -> float:
        return allocation_balance(allocation).as_gpu_hours()[name]

    def get_granted_gpu_hours(self, allocation: Allocation) -> float:
        return self._hours(allocation, "granted_gpu_hours")

    def get_used_gpu_hours(self, allocation: Allocation) -> float:
        return self._hours(allocation, "used_gpu_hours")

    def get_held_gpu_hours(self, allocation: Allocation) -> float:
        return self._hours(allocation, "held_gpu_hours")

    def get_available_gpu_hours(self, allocation: Allocation) -> float:
        return self._hours(allocation, "available_gpu_hours")


class ProjectSerializer(serializers.Serializer):
    """A project as one of its members sees it (the instance is their Membership)."""

    slug = serializers.CharField(source="project.slug")
    name = serializers.CharField(source="project.name")
    slurm_account = serializers.CharField(source="project.slurm_account")
    description = serializers.CharField(source="project.description")
    role = serializers.ChoiceField(choices=Membership.Role.choices, help_text="Your role.")
    balance = serializers.SerializerMethodField(
        help_text="The sum over the project's allocations in force today (one whose "
        "period starts later is not in it)."
    )
    allocations = AllocationSerializer(source="project.allocations.all", many=True)

    @extend_schema_field(BalanceSerializer)
    def get_balance(self, membership: Membership) -> dict[str, float]:
        return balance_of(membership.project.allocations.all())


class MemberSerializer(serializers.Serializer):
    username = serializers.CharField(source="user.username")
    full_name = serializers.CharField(source="user.get_full_name")
    role = serializers.ChoiceField(choices=Membership.Role.choices)


class ProjectDetailSerializer(ProjectSerializer):
    members = serializers.SerializerMethodField()

    @extend_schema_field(MemberSerializer(many=True))
    def get_members(self, membership: Membership) -> Any:
        members = membership.project.memberships.select_related("user").order_by(
            "role", "user__username"
        )
        return MemberSerializer(members, many=True).data


class MyProjectSerializer(serializers.Serializer):
    slug = serializers.CharField(source="project.slug")
    name = serializers.CharField(source="project.name")
    role = serializers.ChoiceField(choices=Membership.Role.choices)


class MeSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()
    full_name = serializers.CharField(source="get_full_name")
    email = serializers.CharField()
    posix_username = serializers.CharField(
        allow_null=True, help_text="The Unix login your jobs run as (set by an administrator)."
    )
    is_allocation_manager = serializers.SerializerMethodField()
    projects = serializers.SerializerMethodField()
    job_mail = serializers.ChoiceField(
        choices=User.JobMail.choices,
        help_text="Which of your jobs' ends you are mailed about: all, failures (failed, "
        "timeout, out of memory, node failure, preempted; not cancelled) or never.",
    )
    mail_language = serializers.CharField(
        help_text="The language of those mails (empty: the portal's default)."
    )

    def get_is_allocation_manager(self, user: User) -> bool:
        return is_allocation_manager(user)

    @extend_schema_field(MyProjectSerializer(many=True))
    def get_projects(self, user: User) -> Any:
        memberships = Membership.objects.filter(user=user).select_related("project")
        return MyProjectSerializer(memberships.order_by("project__name"), many=True).data


class PreferencesSerializer(serializers.Serializer):
    job_mail = serializers.ChoiceField(choices=User.JobMail.choices, required=False)
    mail_language = serializers.ChoiceField(choices=(), required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        language = cast(serializers.ChoiceField, self.fields["mail_language"])
        language.choices = mail_language_choices()


class UsageRowSerializer(serializers.Serializer):
    key = serializers.CharField(
        allow_null=True,
        help_text="A username, a partition name or a month (YYYY-MM); null: work of no "
        "portal user (e.g. submitted outside the portal) or of an unknown partition.",
    )
    used_gpu_hours = serializers.FloatField()


class UsageQuerySerializer(serializers.Serializer):
    group_by = serializers.ChoiceField(choices=sorted(USAGE_GROUPS), default="user")


class UsageSerializer(serializers.Serializer):
    project = serializers.CharField()
    group_by = serializers.ChoiceField(choices=sorted(USAGE_GROUPS))
    total_gpu_hours = serializers.FloatField()
    rows = UsageRowSerializer(many=True)


# Views.


class Me(APIView):
    @extend_schema(
        tags=["me"], summary="The user who calls, with their projects", responses=MeSerializer
    )
    def get(self, request: Request) -> Response:
        return Response(MeSerializer(caller(request)).data)

    @extend_schema(
        tags=["me"],
        summary="Change your preferences (job-end mails and their language)",
        request=PreferencesSerializer,
        responses=MeSerializer,
    )
    def patch(self, request: Request) -> Response:
        serializer = PreferencesSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        user = preferences_update(user=caller(request), **serializer.validated_data)
        return Response(MeSerializer(user).data)


class ProjectList(APIView):
    @extend_schema(
        tags=["projects"],
        summary="Your projects, with allocations and balances",
        responses=ProjectSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        return Response(ProjectSerializer(memberships_of_user(caller(request)), many=True).data)


class ProjectDetail(APIView):
    @extend_schema(
        tags=["projects"],
        summary="One of your projects: members, allocations and balance",
        responses=ProjectDetailSerializer,
    )
    def get(self, request: Request, slug: str) -> Response:
        return Response(ProjectDetailSerializer(membership_or_404(caller(request), slug)).data)


def _usage_key(key: object) -> str | None:
    if isinstance(key, dt.datetime | dt.date):
        return key.strftime("%Y-%m")
    return None if key is None else str(key)


class ProjectUsage(APIView):
    api_errors = {
        "get": {
            400: "invalid: group_by is not one of user, month, partition.",
            403: "permission_denied: only the project's PI and co-PIs see its usage; "
            "members see the balance on the project.",
        }
    }

    @extend_schema(
        tags=["projects"],
        summary="GPU-hours charged to the project, by user, month or partition (PI/co-PI)",
        parameters=[UsageQuerySerializer],
        responses=UsageSerializer,
    )
    def get(self, request: Request, slug: str) -> Response:
        membership = membership_or_404(caller(request), slug)
        # Usage by user shows what each teammate spent: DESIGN gives that to the leads.
        if not is_lead_role(membership.role):
            raise exceptions.PermissionDenied(
                "Only the project's PI and co-PIs see its usage; the balance is on the project."
            )
        group_by = query(UsageQuerySerializer, request)["group_by"]
        usage = project_usage(membership.project, group_by=group_by)
        data = {
            "project": membership.project.slug,
            "group_by": group_by,
            "total_gpu_hours": sum(hours for _, hours in usage),
            "rows": [{"key": _usage_key(key), "used_gpu_hours": hours} for key, hours in usage],
        }
        return Response(UsageSerializer(data).data)


# Allocation requests.


class AllocationRequestSerializer(serializers.ModelSerializer):
    project = related("slug")
    cluster = related("name")
    requested_by = related("username")
    decided_by = related("username", null=True)
    allocation: serializers.PrimaryKeyRelatedField[Allocation] = serializers.PrimaryKeyRelatedField(
        read_only=True, allow_null=True, help_text="The allocation an approval granted."
    )

    class Meta:
        model = AllocationRequest
        fields = [
            "id",
            "project",
            "cluster",
            "requested_by",
            "gpu_hours",
            "starts_on",
            "ends_on",
            "justification",
            "state",
            "decided_by",
            "decided_at",
            "decision_comment",
            "allocation",
            "created_at",
        ]
        read_only_fields = fields


class AllocationRequestQuerySerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=AllocationRequest.State.choices, required=False)
    project = serializers.CharField(required=False, help_text="A project's slug.")


class AllocationRequestCreateSerializer(serializers.Serializer):
    project = serializers.CharField(help_text="The project's slug; you are its PI or a co-PI.")
    cluster = serializers.CharField(
        required=False, allow_null=True, help_text="Optional when the portal has one cluster."
    )
    gpu_hours = serializers.IntegerField(min_value=1, max_value=2**31 - 1)
    starts_on = serializers.DateField()
    ends_on = serializers.DateField()
    justification = serializers.CharField(max_length=10_000)


class DecisionSerializer(serializers.Serializer):
    comment = serializers.CharField(
        required=False, allow_blank=True, max_length=10_000, trim_whitespace=True
    )


class DenialSerializer(serializers.Serializer):
    comment = serializers.CharField(max_length=10_000, help_text="Why: the PI reads it. Required.")


class AllocationRequestList(APIView):
    api_errors = {
        "get": {400: "invalid: state is not one of pending, approved, denied."},
        "post": {
            403: "permission_denied: only the project's PI or a co-PI can ask for GPU-hours.",
        },
    }

    @extend_schema(
        tags=["allocation requests"],
        summary="Requests for GPU-hours: all of them for allocation managers, "
        "those of the projects you lead for PIs and co-PIs",
        parameters=[AllocationRequestQuerySerializer],
        responses=AllocationRequestSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        requests = allocation_requests_for(caller(request))
        params = query(AllocationRequestQuerySerializer, request)
        if "state" in params:
            requests = requests.filter(state=params["state"])
        if "project" in params:
            requests = requests.filter(project__slug=params["project"])
        return Response(AllocationRequestSerializer(requests, many=True).data)

    @extend_schema(
        tags=["allocation requests"],
        summary="Ask for GPU-hours for a project you lead",
        request=AllocationRequestCreateSerializer,
        responses={201: AllocationRequestSerializer},
    )
    def post(self, request: Request) -> Response:
        serializer = AllocationRequestCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        created = allocation_request_create(
            project=member_project(caller(request), data["project"]),
            cluster=cluster_named(data.get("cluster")),
            requested_by=caller(request),
            gpu_hours=data["gpu_hours"],
            starts_on=data["starts_on"],
            ends_on=data["ends_on"],
            justification=data["justification"],
        )
        return Response(AllocationRequestSerializer(created).data, status=status.HTTP_201_CREATED)


class _Decide(APIView):
    api_errors = {
        "post": {
            403: "permission_denied: only allocation managers decide on requests.",
            409: "already_decided: the request was approved or denied before; "
            "allocation_overlap: the project already has an allocation on the cluster "
            "in that period.",
        }
    }

    def _pending(self, request: Request, pk: int) -> AllocationRequest:
        # Checked before the look-up: who may not decide learns nothing of the ids.
        if not is_allocation_manager(caller(request)):
            raise exceptions.PermissionDenied("Only allocation managers decide on requests.")
        found = AllocationRequest.objects.filter(pk=pk).first()
        if found is None:
            raise exceptions.NotFound(f"There is no allocation request {pk}.")
        if found.state != AllocationRequest.State.PENDING:
            raise Conflict(
                f"This request was already {found.get_state_display().lower()}.",
                code="already_decided",
            )
        return found


class AllocationRequestApprove(_Decide):
    @extend_schema(
        tags=["allocation requests"],
        summary="Approve a request: its GPU-hours are granted (allocation managers)",
        request=DecisionSerializer,
        responses=AllocationRequestSerializer,
    )
    def post(self, request: Request, pk: int) -> Response:
        serializer = DecisionSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        approved = allocation_request_approve(
            request=self._pending(request, pk),
            manager=caller(request),
            comment=serializer.validated_data.get("comment", ""),
        )
        return Response(AllocationRequestSerializer(approved).data)


class AllocationRequestDeny(_Decide):
    @extend_schema(
        tags=["allocation requests"],
        summary="Deny a request, saying why (allocation managers)",
        request=DenialSerializer,
        responses=AllocationRequestSerializer,
    )
    def post(self, request: Request, pk: int) -> Response:
        serializer = DenialSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        denied = allocation_request_deny(
            request=self._pending(request, pk),
            manager=caller(request),
            comment=serializer.validated_data["comment"],
        )
        return Response(AllocationRequestSerializer(denied).data)


# Personal access tokens.


class TokenSerializer(serializers.ModelSerializer):
    class Meta:
        model = PersonalAccessToken
        fields = ["id", "name", "prefix", "created_at", "expires_at", "last_used_at", "revoked_at"]
        read_only_fields = fields
        extra_kwargs = {"prefix": {"help_text": "The token's first characters, to recognise it."}}


class NewTokenSerializer(TokenSerializer):
    token = serializers.SerializerMethodField(
        help_text="The token itself: shown this once, never again. Send it as "
        "`Authorization: Bearer <token>`."
    )

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "token"]
        read_only_fields = fields

    def get_token(self, token: PersonalAccessToken) -> str:
        return self.context["plain"]


class TokenCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100, help_text="What the token is for.")
    expires_in_days = serializers.IntegerField(
        required=False,
        min_value=1,
        help_text="How long it lasts, 1 to PORTAL_API_TOKEN_MAX_DAYS (365 unless configured); "
        "default PORTAL_API_TOKEN_DEFAULT_DAYS (30).",
    )

    def validate_expires_in_days(self, days: int) -> int:
        if days > settings.API_TOKEN_MAX_DAYS:
            raise serializers.ValidationError(
                f"A token lasts at most {settings.API_TOKEN_MAX_DAYS} days."
            )
        return days


class TokenList(APIView):
    api_errors = {
        "post": {
            403: "permission_denied: tokens are created from a logged-in browser session; "
            "a token cannot create tokens.",
            409: "too_many_tokens: you have as many live tokens as allowed "
            "(PORTAL_API_MAX_TOKENS_PER_USER, 20 unless configured; `limit` says how many); "
            "revoke one first.",
        }
    }

    @extend_schema(
        tags=["tokens"],
        summary="Your personal access tokens (never their secrets)",
        responses=TokenSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        return Response(TokenSerializer(tokens.tokens_of(caller(request)), many=True).data)

    @extend_schema(
        tags=["tokens"],
        summary="Create a token (browser session only); the answer shows it once",
        request=TokenCreateSerializer,
        responses={201: NewTokenSerializer},
    )
    def post(self, request: Request) -> Response:
        # A stolen token must not be able to mint itself successors that outlive it.
        if not isinstance(request.successful_authenticator, SessionAuthentication):
            raise exceptions.PermissionDenied(
                "Tokens are created from a logged-in browser session; a token cannot create tokens."
            )
        serializer = TokenCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        token, plain = tokens.token_create(
            user=caller(request),
            name=serializer.validated_data["name"],
            expires_in_days=serializer.validated_data.get("expires_in_days"),
        )
        data = NewTokenSerializer(token, context={"plain": plain}).data
        return Response(data, status=status.HTTP_201_CREATED)


class TokenDetail(APIView):
    @extend_schema(
        tags=["tokens"],
        summary="Revoke one of your tokens (a repeat changes nothing)",
        responses={204: None},
    )
    def delete(self, request: Request, pk: int) -> Response:
        token = tokens.tokens_of(caller(request)).filter(pk=pk).first()
        if token is None:
            raise not_found(f"token {pk}")
        tokens.token_revoke(token=token)
        return Response(status=status.HTTP_204_NO_CONTENT)
