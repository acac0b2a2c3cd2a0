"""Project memberships that follow directory or provider groups (``PORTAL_GROUP_PROJECTS``).

A site maps groups to a project and a role (``vision-members=vision:member``); a
person in several mapped groups of one project gets the highest role. Only the
memberships made here (``Membership.Source.DIRECTORY``) are changed or removed here: one
made by hand in the console or the API stays as it is, and the reconciler follows both.
"""

import logging

from django.conf import settings

from accounts.models import Membership, Project, User
from accounts.services import membership_remove, membership_set

logger = logging.getLogger(__name__)

ROLE_RANK: dict[str, int] = {
    Membership.Role.MEMBER: 0,
    Membership.Role.CO_PI: 1,
    Membership.Role.PI: 2,
}


def roles_from_groups(groups: frozenset[str]) -> dict[str, str]:
    """Project slug → role for someone in ``groups``, by the site's mapping."""
    roles: dict[str, str] = {}
    for group, slug, role in settings.GROUP_PROJECTS:
        if group in groups and ROLE_RANK[role] > ROLE_RANK.get(roles.get(slug, ""), -1):
            roles[slug] = role
    return roles


def memberships_follow_groups(user: User, groups: frozenset[str]) -> list[str]:
    """Bring ``user``'s group-made memberships in line with ``groups``; what changed."""
    if not settings.GROUP_PROJECTS:
        return []
    wanted = roles_from_groups(groups)
    projects = {p.slug: p for p in Project.objects.filter(slug__in=wanted)}
    for slug in wanted.keys() - projects.keys():
        logger.warning("PORTAL_GROUP_PROJECTS names project %r, which does not exist", slug)
    have = {
        m.project.slug: m for m in Membership.objects.filter(user=user).select_related("project")
    }
    changes = []
    for slug, role in wanted.items():
        membership = have.get(slug)
        if slug not in projects or (membership and membership.source == Membership.Source.MANUAL):
            continue
        if membership is None or membership.role != role:
            membership_set(
                project=projects[slug], user=user, role=role, source=Membership.Source.DIRECTORY
            )
            changes.append(f"{user} is {role} of {slug}")
    for slug, membership in have.items():
        if membership.source == Membership.Source.DIRECTORY and slug not in wanted:
            membership_remove(project=membership.project, user=user)
            changes.append(f"{user} left {slug}")
    return changes
