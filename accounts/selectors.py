"""Reads of projects and allocations shared by pages and the API."""

from django.db.models import Prefetch, QuerySet

from accounts.models import Allocation, Membership, User


def memberships_of_user(user: User) -> QuerySet[Membership]:
    """The user's memberships with their projects and allocations, by project name."""
    return (
        Membership.objects.filter(user=user)
        .select_related("project")
        .prefetch_related(
            Prefetch(
                "project__allocations",
                queryset=Allocation.objects.select_related("cluster").order_by("-starts_on"),
            )
        )
        .order_by("project__name")
    )
