"""Who may do what: the one home of the portal's roles (DESIGN "Roles").

A project's leads are its PI and co-PIs: they see all its jobs and usage, ask for
hours, share templates with it, and act on its members' jobs. Allocation managers (a
group; superusers too) grant and decide. Every view, API, service and selector asks
here rather than spelling the roles out.
"""

from typing import Any

from django.db.models import QuerySet
from django.utils.translation import gettext as _

from accounts.groups import ALLOCATION_MANAGERS
from accounts.models import MemberCap, Membership, Project, User

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
    """Who caps members' GPU-hours at all: the project's PI and co-PIs, and allocation
    managers. Which caps each of them may change is ``cap_change_refusal``'s."""
    return is_lead(user, project) or is_allocation_manager(user)


def cap_change_refusal(
    actor: User,
    *,
    project: Project | int,
    member: User | None,
    cap: MemberCap | None,
    default: MemberCap | None,
    gpu_seconds: int | None,
) -> str:
    """Why ``actor`` may not set (to ``gpu_seconds``) or lift (None) the cap of ``member``
    (None: the default of every member) on an allocation of ``project``; "" when they may.
    ``cap`` is that cap as it is now, ``default`` the allocation's default (None: none).

    Nobody changes their own cap. Only allocation managers change or lift a cap an
    allocation manager set, or give a member more than a default one set (a member's
    own cap wins over the default, so that would lift it for them); lifting a lead's own
    cap for a member leaves the manager's default in force, and is the leads' to do."""
    if not may_set_caps(actor, project):
        return _("Only the project's PI and co-PIs and allocation managers set caps.")
    if member is not None and member.pk == actor.pk:
        return _(
            "Nobody changes their own cap: another of the project's leads or an allocation "
            "manager does."
        )
    if is_allocation_manager(actor):
        return ""
    if cap is not None and set_by_manager(cap):
        return _("An allocation manager set this cap: only allocation managers change or lift it.")
    if (
        member is not None
        and gpu_seconds is not None
        and default is not None
        and set_by_manager(default)
        and gpu_seconds > default.gpu_seconds
    ):
        return _(
            "An allocation manager set every member's default cap at %(cap)s GPU-hours: "
            "only allocation managers give a member more."
        ) % {"cap": f"{default.gpu_seconds / 3600:,g}"}
    return ""


def set_by_manager(cap: MemberCap) -> bool:
    """Whether an allocation manager set the cap last (as they are now)."""
    return cap.set_by is not None and is_allocation_manager(cap.set_by)
