"""REST API of per-member GPU-hour caps (``accounts.caps``) under a project.

``/projects/<slug>/caps/`` is the allocation's caps: its PI and co-PIs see every
member's cap, use and what is left, a member only their own; PUT and DELETE there set
and lift the default of every member, under ``caps/<username>/`` one member's own cap.
Only the PI and co-PIs change caps here (allocation managers use the console), never
their own, nor a cap an allocation manager set (``cap_change_refusal``: a 403 that says
why). Anyone not in the project gets a 404, as for the project itself.
"""

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api import membership_or_404
from accounts.api_support import caller, cluster_named, not_found, query
from accounts.caps import (
    MAX_CAP_GPU_HOURS,
    MemberStanding,
    allocation_standings,
    member_cap_clear,
    member_cap_set,
)
from accounts.models import Allocation, MemberCap, Membership, User
from accounts.permissions import is_lead_role, may_set_caps
from accounts.selectors import active_allocation


class CapQuerySerializer(serializers.Serializer):
    cluster = serializers.CharField(
        required=False, help_text="The cluster of the allocation; optional when there is one."
    )


class CapSetSerializer(CapQuerySerializer):
    gpu_hours = serializers.FloatField(
        min_value=0,
        max_value=MAX_CAP_GPU_HOURS,
        help_text="The most GPU-hours the member may spend of the allocation.",
    )


class MemberCapSerializer(serializers.Serializer):
    username = serializers.CharField()
    cap_gpu_hours = serializers.FloatField(allow_null=True, help_text="null: no cap.")
    own_cap = serializers.BooleanField(
        help_text="Whether the cap is the member's own (false: the default, or none)."
    )
    used_gpu_hours = serializers.FloatField(
        help_text="Charged for the member's work on the allocation plus what their jobs hold."
    )
    remaining_gpu_hours = serializers.FloatField(allow_null=True, help_text="null: no cap.")


class CapsSerializer(serializers.Serializer):
    project = serializers.CharField()
    cluster = serializers.CharField()
    allocation = serializers.IntegerField(help_text="The active allocation's id.")
    default_cap_gpu_hours = serializers.FloatField(
        allow_null=True, help_text="Every member's cap unless they have their own; null: none."
    )
    members = MemberCapSerializer(
        many=True, help_text="Every member for the PI and co-PIs; yourself for a member."
    )


def _member_row(standing: MemberStanding) -> dict[str, Any]:
    return {
        "username": standing.user.get_username(),
        "own_cap": standing.is_own_cap,
        **standing.as_gpu_hours(),
    }


def _caps_data(membership: Membership, allocation: Allocation) -> dict[str, Any]:
    standings = allocation_standings(allocation)
    if not is_lead_role(membership.role):
        standings = [s for s in standings if s.user.pk == membership.user_id]
    default = MemberCap.objects.filter(allocation=allocation, user=None).first()
    return {
        "project": membership.project.slug,
        "cluster": allocation.cluster.name,
        "allocation": allocation.pk,
        "default_cap_gpu_hours": default.gpu_hours if default else None,
        "members": [_member_row(standing) for standing in standings],
    }


def _allocation(membership: Membership, cluster: str | None) -> Allocation:
    return active_allocation(project=membership.project, cluster=cluster_named(cluster))


def _member(membership: Membership, username: str) -> User:
    found = (
        Membership.objects.filter(project=membership.project, user__username=username)
        .select_related("user")
        .first()
    )
    if found is None:
        raise exceptions.NotFound(f"{membership.project.slug} has no member {username!r}.")
    return found.user


_ERRORS = {
    "put": {
        403: "permission_denied: only the project's PI and co-PIs set caps; nobody sets "
        "their own, and a cap an allocation manager set only a manager changes (the "
        "message says which).",
        409: "no_active_allocation: the project has no active allocation on the cluster.",
    },
    "delete": {
        403: "permission_denied: only the project's PI and co-PIs lift caps; nobody lifts "
        "their own, and a cap an allocation manager set only a manager lifts (the message "
        "says which).",
        409: "no_active_allocation: the project has no active allocation on the cluster.",
    },
    "get": {409: "no_active_allocation: the project has no active allocation on the cluster."},
}


class _Caps(APIView):
    api_errors = _ERRORS

    def _respond(self, request: Request, slug: str, *, username: str | None, set_to: bool) -> Any:
        membership = membership_or_404(caller(request), slug)
        # Asked first: a member learns nothing from what their request held.
        if not may_set_caps(caller(request), membership.project_id):
            raise exceptions.PermissionDenied("Only the project's PI and co-PIs set caps.")
        if set_to:
            body = CapSetSerializer(data=request.data)
            body.is_valid(raise_exception=True)
            params = dict(body.validated_data)
        else:
            params = query(CapQuerySerializer, request)
        allocation = _allocation(membership, params.get("cluster"))
        target = None if username is None else _member(membership, username)
        if set_to:
            member_cap_set(
                actor=caller(request),
                allocation=allocation,
                user=target,
                gpu_hours=params["gpu_hours"],
            )
        else:
            member_cap_clear(actor=caller(request), allocation=allocation, user=target)
        return Response(CapsSerializer(_caps_data(membership, allocation)).data)


class ProjectCaps(_Caps):
    @extend_schema(
        tags=["caps"],
        summary="Members' GPU-hour caps on the project's allocation: every member's for "
        "the PI and co-PIs, your own for a member",
        parameters=[CapQuerySerializer],
        responses=CapsSerializer,
    )
    def get(self, request: Request, slug: str) -> Response:
        membership = membership_or_404(caller(request), slug)
        allocation = _allocation(membership, query(CapQuerySerializer, request).get("cluster"))
        return Response(CapsSerializer(_caps_data(membership, allocation)).data)

    @extend_schema(
        tags=["caps"],
        summary="Set every member's default cap (PI/co-PI)",
        request=CapSetSerializer,
        responses=CapsSerializer,
    )
    def put(self, request: Request, slug: str) -> Response:
        return self._respond(request, slug, username=None, set_to=True)

    @extend_schema(
        tags=["caps"],
        summary="Lift the default cap (PI/co-PI); members' own caps stay",
        parameters=[CapQuerySerializer],
        responses=CapsSerializer,
    )
    def delete(self, request: Request, slug: str) -> Response:
        return self._respond(request, slug, username=None, set_to=False)


class MemberCapDetail(_Caps):
    @extend_schema(
        tags=["caps"],
        summary="One member's cap, use and what is left (the member or a PI/co-PI)",
        operation_id="projects_member_cap_retrieve",
        parameters=[CapQuerySerializer],
        responses=MemberCapSerializer,
    )
    def get(self, request: Request, slug: str, username: str) -> Response:
        membership = membership_or_404(caller(request), slug)
        allocation = _allocation(membership, query(CapQuerySerializer, request).get("cluster"))
        rows = _caps_data(membership, allocation)["members"]
        row = next((r for r in rows if r["username"] == username), None)
        if row is None:
            # A member asking of a teammate learns no more than of a stranger.
            raise not_found(f"cap of {username!r}")
        return Response(MemberCapSerializer(row).data)

    @extend_schema(
        tags=["caps"],
        summary="Set one member's own cap (PI/co-PI)",
        operation_id="projects_member_cap_update",
        request=CapSetSerializer,
        responses=CapsSerializer,
    )
    def put(self, request: Request, slug: str, username: str) -> Response:
        return self._respond(request, slug, username=username, set_to=True)

    @extend_schema(
        tags=["caps"],
        summary="Lift one member's own cap (PI/co-PI); the default, if any, applies",
        operation_id="projects_member_cap_destroy",
        parameters=[CapQuerySerializer],
        responses=CapsSerializer,
    )
    def delete(self, request: Request, slug: str, username: str) -> Response:
        return self._respond(request, slug, username=username, set_to=False)
