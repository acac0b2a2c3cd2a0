"""Every write to users, projects, memberships and allocations."""

import logging

from django.contrib.auth.models import Group
from django.db import transaction

from accounts.models import Membership, Project, User

logger = logging.getLogger(__name__)


def _by(actor: User | None) -> str:
    return actor.get_username() if actor is not None else "the system"


def project_create(
    *,
    slug: str,
    name: str,
    slurm_account: str,
    description: str = "",
    actor: User | None = None,
) -> Project:
    project = Project(slug=slug, name=name, slurm_account=slurm_account, description=description)
    project.full_clean()
    project.save()
    logger.info("project %s created with Slurm account %s by %s", slug, slurm_account, _by(actor))
    return project


def project_update(
    *,
    project: Project,
    actor: User | None,
    name: str | None = None,
    slug: str | None = None,
    description: str | None = None,
) -> Project:
    """Change a project's name, slug or description; the fields not given stay.

    The Slurm account is not among them: the project's Slurm account, its
    associations and its limit carry that name, and renaming it here would
    leave them behind.
    """
    wanted = {"name": name, "slug": slug, "description": description}
    with transaction.atomic():
        locked = Project.objects.select_for_update().get(pk=project.pk)
        changed = [
            field
            for field, value in wanted.items()
            if value is not None and value != getattr(locked, field)
        ]
        for field in changed:
            setattr(locked, field, wanted[field])
        if changed:
            locked.full_clean()
            locked.save(update_fields=changed)
    if changed:
        logger.info("project %s: %s changed by %s", locked.slug, ", ".join(changed), _by(actor))
    return locked


def membership_set(
    *, project: Project, user: User, role: str, actor: User | None = None
) -> Membership:
    """Add ``user`` to ``project`` with ``role``, or change the role they have."""
    with transaction.atomic():
        membership, created = Membership.objects.select_for_update().get_or_create(
            project=project, user=user, defaults={"role": role}
        )
        was = membership.role
        if membership.role != role:
            membership.role = role
            membership.save(update_fields=["role"])
    if created:
        logger.info("project %s: %s added as %s by %s", project.slug, user, role, _by(actor))
    elif was != role:
        logger.info(
            "project %s: %s changed from %s to %s by %s", project.slug, user, was, role, _by(actor)
        )
    return membership


def membership_remove(*, project: Project, user: User, actor: User | None = None) -> bool:
    """Take ``user`` out of ``project``; False when they were not a member (a repeat)."""
    deleted, _ = Membership.objects.filter(project=project, user=user).delete()
    if deleted:
        logger.info("project %s: %s removed by %s", project.slug, user, _by(actor))
    return bool(deleted)


def user_create(
    *,
    username: str,
    password: str,
    full_name: str = "",
    email: str = "",
    posix_username: str | None = None,
    is_staff: bool = False,
    groups: tuple[str, ...] = (),
) -> User:
    first_name, _, last_name = full_name.partition(" ")
    with transaction.atomic():
        user = User(
            username=username,
            first_name=first_name,
            last_name=last_name,
            email=email,
            posix_username=posix_username,
            is_staff=is_staff,
        )
        user.set_password(password)
        user.full_clean()
        user.save()
        for name in groups:
            user.groups.add(Group.objects.get(name=name))
    return user
