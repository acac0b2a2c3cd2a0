"""Every write to users, projects, memberships and allocations."""

from django.contrib.auth.models import Group
from django.db import transaction

from accounts.models import Membership, Project, User


def project_create(*, slug: str, name: str, slurm_account: str, description: str = "") -> Project:
    project = Project(slug=slug, name=name, slurm_account=slurm_account, description=description)
    project.full_clean()
    project.save()
    return project


def membership_set(*, project: Project, user: User, role: str) -> Membership:
    """Add ``user`` to ``project`` with ``role``, or change the role they have."""
    with transaction.atomic():
        membership, _ = Membership.objects.select_for_update().get_or_create(
            project=project, user=user, defaults={"role": role}
        )
        if membership.role != role:
            membership.role = role
            membership.save(update_fields=["role"])
    return membership


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
