"""What every API module shares: the caller, a 409, checked query parameters, related
objects by name, and the caller's project or a cluster named in a request.

accounts/api.py and jobs/api.py both use it; it knows no resource of its own.
"""

from typing import Any

from rest_framework import exceptions, serializers, status
from rest_framework.request import Request

import clusters.selectors
from accounts import permissions
from accounts.models import Project, User
from clusters.errors import NoSuchCluster
from clusters.models import Cluster


class Conflict(exceptions.APIException):
    """409: the request clashes with the object's state; ``code`` says how."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"
    default_detail = "The request conflicts with the current state."


def caller(request: Request) -> User:
    """The user who calls; every view but the schema's lets only the authenticated in."""
    user = request.user
    if not isinstance(user, User):
        raise exceptions.NotAuthenticated()
    return user


def related(attribute: str, *, null: bool = False) -> serializers.SlugRelatedField[Any]:
    """A related object shown by one of its fields (a slug, a name, a username)."""
    return serializers.SlugRelatedField(slug_field=attribute, read_only=True, allow_null=null)


def query(serializer_class: type[serializers.Serializer], request: Request) -> dict[str, Any]:
    """The request's query parameters, checked (a 400 naming the parameter) like a body."""
    serializer = serializer_class(data=request.query_params)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def not_found(what: str) -> exceptions.NotFound:
    return exceptions.NotFound(f"There is no {what} of yours.")


def member_project(user: User, slug: Any, *, field: str = "project") -> Project:
    """A project named in a request body: one of the user's, or a 400 on ``field``
    (the same words whether it exists or not: an outsider learns nothing)."""
    membership = permissions.membership_of(user, slug)
    if membership is None:
        raise exceptions.ValidationError({field: [f"You are not a member of a project {slug!r}."]})
    return membership.project


def cluster_named(name: str | None, *, field: str = "cluster") -> Cluster:
    """The enabled cluster ``name``; left out, the only one (or a 400 on ``field``)."""
    try:
        return clusters.selectors.cluster_named(name)
    except NoSuchCluster as error:
        raise exceptions.ValidationError({field: [str(error)]}) from None
