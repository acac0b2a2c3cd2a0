"""Who may do what: the one home of the portal's roles (DESIGN "Roles").

A project's leads are its PI and co-PIs: they see all its jobs and usage, ask for
hours, share templates with it, and act on its members' jobs. Allocation managers (a
group; superusers too) grant and decide. Every view, API, service and selector asks
here rather than spelling the roles out.
"""

from typing import Any

from django.db.models import QuerySet

from accounts.groups import ALLOCATION_MANAGERS
from accounts.models import Membership, Project, User

LEAD_ROLES = (Membership.Role.PI, Membership.Role.CO_PI)


def is_allocation_manager(user: User) -> bool:
    return user.is_active and (
        user.is_superuser or user.groups.filter(name=ALLOCATION_MANAGERS).exists()
    )


def is_lead(user: User, project: Project | int) -> bool:
    """Whether ``user`` is the PI or a co-PI of ``project`` (a row or its id)."""
    project_id = project if isinstance(project, int) else project.pk
    return Membership.objects.filter(user=user, project_id=project_id, role__in=LEAD_ROLES).exists()


def is_lead_role(role: str | None) -> bool:
    return role in LEAD_ROLES


def led_project_ids(user: User) -> QuerySet[Membership, Any]:
    """The ids of the projects ``user`` leads, as a subquery (``project_id__in=``)."""
    return Membership.objects.filter(user=user, role__in=LEAD_ROLES).values("project_id")


def membership_of(user: User, slug: object) -> Membership | None:
    """``user``'s membership of the project ``slug`` (with the project), or None: the same
    answer whether the project exists or not, so an outsider learns nothing."""
    try:
        return Membership.objects.select_related("project").get(user=user, project__slug=str(slug))
    except Membership.DoesNotExist:
        return None


def leads_of(project_ids: set[int]) -> QuerySet[Membership]:
    """The memberships of the active PIs and co-PIs of these projects, with their users."""
    return Membership.objects.filter(
        project__in=project_ids, role__in=LEAD_ROLES, user__is_active=True
    ).select_related("user")


def may_set_caps(user: User, project: Project | int) -> bool:
    """Who caps a member's GPU-hours: the project's PI and co-PIs, and allocation
    managers; never the member (accounts.caps)."""
    return is_lead(user, project) or is_allocation_manager(user)
