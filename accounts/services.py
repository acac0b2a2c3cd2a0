"""Every write to users, projects, memberships and allocations."""

import logging

from django.contrib.auth.models import Group
from django.db import transaction
from django.utils.translation import gettext_lazy as _

from accounts.errors import NotAllowed
from accounts.models import Membership, Project, User
from audit.models import AuditEvent
from audit.services import audit_record

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
    with transaction.atomic():
        project.save()
        audit_record(
            actor=actor,
            action=AuditEvent.Action.PROJECT_CREATE,
            target=project,
            scope=project.slurm_account,
            detail={"slug": slug, "name": name},
        )
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
        was = {field: getattr(locked, field) for field in changed}
        for field in changed:
            setattr(locked, field, wanted[field])
        if changed:
            locked.full_clean()
            locked.save(update_fields=changed)
            audit_record(
                actor=actor,
                action=AuditEvent.Action.PROJECT_UPDATE,
                target=locked,
                scope=locked.slurm_account,
                detail={field: {"was": was[field], "now": wanted[field]} for field in changed},
            )
    if changed:
        logger.info("project %s: %s changed by %s", locked.slug, ", ".join(changed), _by(actor))
    return locked


OWN_MEMBERSHIP = _(
    "You cannot add yourself to a project or change your own role: another allocation "
    "manager or a superuser does that, and it is audited."
)


def membership_set(
    *,
    project: Project,
    user: User,
    role: str,
    actor: User | None = None,
    source: str = Membership.Source.MANUAL,
) -> Membership:
    """Add ``user`` to ``project`` with ``role``, or change the role they have.

    ``source`` says who keeps it: by hand (the default; a membership the group sync made
    becomes one made by hand when someone sets it) or the group sync
    (``accounts.directory_groups``), which never calls this for a membership made by hand.

    Nobody but a superuser makes themselves a member or changes their own role (a manager
    who did would reach the team's jobs and templates): another manager does it, audited.
    """
    if actor is not None and actor.pk == user.pk and not actor.is_superuser:
        raise NotAllowed(OWN_MEMBERSHIP)
    with transaction.atomic():
        membership, created = Membership.objects.select_for_update().get_or_create(
            project=project, user=user, defaults={"role": role, "source": source}
        )
        was = membership.role
        # A group's doing is said in the audit log; by hand is the default, left unsaid.
        by_group = {"source": source} if source != Membership.Source.MANUAL else {}
        if membership.role != role or membership.source != source:
            membership.role = role
            membership.source = source
            membership.save(update_fields=["role", "source"])
        if created:
            _audit_membership(
                actor, AuditEvent.Action.MEMBERSHIP_ADD, membership, role=role, **by_group
            )
        elif was != role:
            _audit_membership(
                actor,
                AuditEvent.Action.MEMBERSHIP_CHANGE,
                membership,
                role=role,
                was=was,
                **by_group,
            )
    if created:
        logger.info("project %s: %s added as %s by %s", project.slug, user, role, _by(actor))
    elif was != role:
        logger.info(
            "project %s: %s changed from %s to %s by %s", project.slug, user, was, role, _by(actor)
        )
    return membership


def membership_remove(*, project: Project, user: User, actor: User | None = None) -> bool:
    """Take ``user`` out of ``project``; False when they were not a member (a repeat)."""
    with transaction.atomic():
        membership = (
            Membership.objects.select_for_update(of=("self",))
            .select_related("project", "user")
            .filter(project=project, user=user)
            .first()
        )
        if membership is None:
            return False
        _audit_membership(
            actor, AuditEvent.Action.MEMBERSHIP_REMOVE, membership, role=membership.role
        )
        membership.delete()
    logger.info("project %s: %s removed by %s", project.slug, user, _by(actor))
    return True


def _audit_membership(
    actor: User | None, action: str, membership: Membership, **detail: str
) -> None:
    audit_record(
        actor=actor,
        action=action,
        target=membership,
        on_behalf_of=membership.user,
        scope=membership.project.slurm_account,
        detail={"user": membership.user.get_username(), **detail},
    )


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
