"""Adopting a Slurm cluster that already runs: list the accounts it has, and hand one a
site made by hand to the portal, bound to a project.

A worker (``account_listing_task``) or ``manage.py import_accounts`` lists a cluster's
accounts and keeps the listing (``SlurmAccountListing``) with, for each account made
by hand, what adopting it would change: the import page shows that snapshot and asks
Slurm nothing. ``account_adopt`` records the adoption (``AdoptedAccount``, audited);
the reconciler then manages the account on that cluster as its own: it adds the
project's members and sets the limits its allocation pays for. The users the site
had associated with the account (as the listing showed them) who are not members are
kept and reported, unless the manager confirmed their removal when adopting; a member
who leaves the project later loses the association, as on the portal's own accounts.
"""

import logging
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.errors import Refused
from accounts.models import (
    AdoptedAccount,
    Membership,
    Project,
    SlurmAccountListing,
    User,
    slurm_account_validator,
    validate_slurm_account_not_root,
)
from accounts.reconcile import adoption_preview, member_posix_names
from accounts.services import OWN_MEMBERSHIP, membership_set, project_create
from audit.models import AuditEvent
from audit.services import audit_record
from clusters.models import Cluster
from clusters.slurm import SlurmClient, SlurmError, client_for
from clusters.slurm.types import PORTAL_ORGANIZATION, SlurmAccount

logger = logging.getLogger(__name__)


def adoption_problem(account: str) -> str:
    """Why an account cannot be any project's (its name), or "" when it can."""
    try:
        slurm_account_validator(account)
        validate_slurm_account_not_root(account)
    except ValidationError as error:
        return " ".join(error.messages)
    return ""


def listing_row(
    client: SlurmClient, cluster: Cluster, account: SlurmAccount, project: Project | None
) -> dict[str, Any]:
    """One account of the listing as the import page and the command show it. For an
    account made by hand whose name is a project's: what adopting it would change (the
    actions the next run would take, the users kept), asked of Slurm as a run would."""
    limits = account.limits
    row: dict[str, Any] = {
        "name": account.name,
        "description": account.description,
        "organization": account.organization,
        "parent": account.parent,
        "users": list(account.users),
        "limits": {
            "gpu_minutes": limits.gpu_minutes,
            "cpu_minutes": limits.cpu_minutes,
            "max_submit_jobs": limits.max_submit_jobs,
            **limits.job_counts,
        },
        "project": project.slug if project is not None else None,
        "changes": [],
        "others": [],
        "problem": adoption_problem(account.name),
    }
    if account.organization == PORTAL_ORGANIZATION or project is None or row["problem"]:
        return row
    row["others"] = sorted(set(account.users) - member_posix_names(project))
    try:
        actions = adoption_preview(client, cluster, project)
    except SlurmError as error:
        row["problem"] = str(error)
        return row
    row["changes"] = [str(action) for action in actions]
    if not actions and not project.allocations.filter(cluster=cluster).exists():
        row["changes"] = [
            f"{account.name}: nothing until the project has an allocation on {cluster.name}"
        ]
    return row


def account_listing_refresh(*, cluster: Cluster) -> SlurmAccountListing:
    """List the cluster's accounts in Slurm and keep the listing as its last one; when
    Slurm does not answer the error is kept with the listing before it."""
    client = client_for(cluster)
    try:
        accounts = client.list_accounts()
        projects = {
            project.slurm_account: project
            for project in Project.objects.filter(slurm_account__in=[a.name for a in accounts])
        }
        rows = [
            listing_row(client, cluster, account, projects.get(account.name))
            for account in accounts
        ]
    except SlurmError as error:
        listing, _ = SlurmAccountListing.objects.update_or_create(
            cluster=cluster,
            defaults={"error": str(error)},
            create_defaults={"listed_at": timezone.now(), "error": str(error)},
        )
        return listing
    listing, _ = SlurmAccountListing.objects.update_or_create(
        cluster=cluster, defaults={"listed_at": timezone.now(), "accounts": rows, "error": ""}
    )
    return listing


def listed_account(cluster: Cluster, account: str) -> dict[str, Any] | None:
    """The account's row in the cluster's last listing, or None."""
    listing = SlurmAccountListing.objects.filter(cluster=cluster).first()
    if listing is None:
        return None
    return next((row for row in listing.accounts if row["name"] == account), None)


def account_adopt(
    *,
    cluster: Cluster,
    account: str,
    actor: User | None,
    project: Project | None = None,
    new_project_slug: str = "",
    new_project_name: str = "",
    pi: User | None = None,
    remove_other_users: bool = False,
) -> AdoptedAccount:
    """Hand the account made by hand on ``cluster`` to the portal, bound to ``project``
    (whose Slurm account has that name, e.g. the portal's on another cluster) or to a new
    project made from it (slug, name, its PI). The account must be in the cluster's last
    listing: its users there who are not the project's members are kept on the account
    (``kept_users``) unless ``remove_other_users``. A repeat into the same project
    returns the adoption made before.

    Raises Refused, saying what to do, when it cannot be adopted so.
    """
    if (project is None) == (not new_project_slug):
        raise Refused(_("Choose either an existing project or a new one to adopt it into."))
    row = listed_account(cluster, account)
    if row is None:
        raise Refused(
            _(
                "%(account)s is not in the last listing of %(cluster)s: list the cluster's "
                "accounts again first."
            )
            % {"account": account, "cluster": cluster.name}
        )
    problem = adoption_problem(account)
    if problem:
        raise Refused(problem)
    if row["organization"] == PORTAL_ORGANIZATION:
        raise Refused(
            _("%(account)s is the portal's own account: there is nothing to adopt.")
            % {"account": account}
        )
    if project is not None and project.slurm_account != account:
        raise Refused(
            _(
                "The project %(project)s has the Slurm account %(other)s, not %(account)s: "
                "adopt an account into the project of its name, or into a new project."
            )
            % {"project": project.slug, "other": project.slurm_account, "account": account}
        )
    if project is None and Project.objects.filter(slurm_account=account).exists():
        raise Refused(
            _("A project already has the Slurm account %(account)s: adopt it into that one.")
            % {"account": account}
        )
    if pi is not None and actor is not None and pi.pk == actor.pk and not actor.is_superuser:
        raise Refused(OWN_MEMBERSHIP)
    with transaction.atomic():
        existing = AdoptedAccount.objects.select_for_update().filter(
            cluster=cluster, account=account
        )
        if (adopted := existing.select_related("project").first()) is not None:
            if project is not None and adopted.project_id == project.pk:
                return adopted
            raise Refused(
                _("%(account)s was already adopted on %(cluster)s, into %(project)s.")
                % {"account": account, "cluster": cluster.name, "project": adopted.project}
            )
        if project is None:
            try:
                project = project_create(
                    slug=new_project_slug,
                    name=new_project_name or new_project_slug,
                    slurm_account=account,
                    description=row["description"],
                    actor=actor,
                )
            except ValidationError as error:
                raise Refused(" ".join(error.messages)) from error
            if pi is not None:
                membership_set(project=project, user=pi, role=Membership.Role.PI, actor=actor)
        members = member_posix_names(project)
        adopted = AdoptedAccount.objects.create(
            cluster=cluster,
            account=account,
            project=project,
            adopted_by=actor,
            remove_other_users=remove_other_users,
            # As the manager saw them in the listing: whoever is associated then and is
            # not a member stays, unless they confirmed the removal.
            kept_users=[] if remove_other_users else sorted(set(row["users"]) - members),
        )
        audit_record(
            actor=actor,
            action=AuditEvent.Action.ACCOUNT_ADOPT,
            target=adopted,
            scope=account,
            detail={
                "cluster": cluster.name,
                "project": project.slug,
                "users": row["users"],
                "limits": row["limits"],
                "remove_other_users": remove_other_users,
                "kept_users": adopted.kept_users,
            },
        )
    logger.info(
        "Slurm account %s on %s adopted into project %s by %s",
        account,
        cluster.name,
        project.slug,
        actor.get_username() if actor is not None else "the system",
    )
    return adopted
