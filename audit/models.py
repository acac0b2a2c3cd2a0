"""Who changed what for whom: one row per write by an allocation manager or on another's behalf.

The bottom app: it imports only Django. What it concerns is named generically
(``target_type``/``target_id``, a ``scope`` string), so the bank and the jobs can
record and filter without this app knowing them.
"""

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class AuditEvent(models.Model):
    """Append-only: written by ``audit.services.audit_record``, never changed or deleted
    (a database trigger refuses UPDATE and DELETE, see migration 0001)."""

    class Action(models.TextChoices):
        ALLOCATION_GRANT = "allocation.grant", _("Allocation granted")
        ALLOCATION_ADJUST = "allocation.adjust", _("Allocation adjusted")
        ALLOCATION_REVOKE = "allocation.revoke", _("Allocation revoked")
        REQUEST_APPROVE = "allocation_request.approve", _("Allocation request approved")
        REQUEST_DENY = "allocation_request.deny", _("Allocation request denied")
        PROJECT_CREATE = "project.create", _("Project created")
        PROJECT_UPDATE = "project.update", _("Project changed")
        ACCOUNT_ADOPT = "slurm_account.adopt", _("Slurm account adopted")
        MEMBERSHIP_ADD = "membership.add", _("Member added")
        MEMBERSHIP_CHANGE = "membership.change", _("Member's role changed")
        MEMBERSHIP_REMOVE = "membership.remove", _("Member removed")
        USER_CREATE = "user.create", _("User created at first sign-in")
        USER_POSIX_CHANGE = "user.posix_username", _("Unix login changed by the directory")
        USER_DISABLE = "user.disable", _("User switched off: gone from the directory")
        USER_ENABLE = "user.enable", _("User switched on: back in the directory")
        USER_IDENTITY_LINK = "user.identity_link", _("Sign-in linked to an account by a manager")
        PARTITION_BILLING_WEIGHT = "partition.billing_weight", _("Billing weight changed")
        PARTITION_CPU_HOUR_RATE = "partition.cpu_hour_rate", _("CPU-hour rate changed")
        JOB_CANCEL = "job.cancel", _("Job cancelled for its owner")
        JOB_HOLD = "job.hold", _("Job held for its owner")
        JOB_RELEASE = "job.release", _("Job released for its owner")
        TEMPLATE_CREATE = "job_template.create", _("Job template created")
        TEMPLATE_UPDATE = "job_template.update", _("Job template changed")
        TEMPLATE_DELETE = "job_template.delete", _("Job template deleted")
        MEMBER_CAP_SET = "member_cap.set", _("Member's GPU-hour cap set")
        MEMBER_CAP_CLEAR = "member_cap.clear", _("Member's GPU-hour cap lifted")

    at = models.DateTimeField(_("at"), default=timezone.now)
    # PROTECT, like the ledger's actor: who acted must outlive any clean-up of users.
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("actor"),
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,  # (actor, at) below serves look-ups by actor
        help_text=_("Empty for the system (a seed, a management command)."),
    )
    action = models.CharField(_("action"), max_length=40, choices=Action.choices)
    target_type = models.CharField(_("target type"), max_length=60)
    target_id = models.CharField(_("target id"), max_length=40)
    target_repr = models.CharField(_("target"), max_length=200)
    on_behalf_of = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("on behalf of"),
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text=_("The owner of what was changed, when it was not the actor."),
    )
    # A project's Slurm account: it never changes, unlike its slug, so a filter by
    # project still finds the rows written before a rename.
    scope = models.CharField(_("scope"), max_length=60, blank=True)
    detail = models.JSONField(_("detail"), default=dict, blank=True, encoder=DjangoJSONEncoder)

    class Meta:
        verbose_name = _("audit event")
        verbose_name_plural = _("audit events")
        ordering = ["-at", "-pk"]
        indexes = [
            models.Index(fields=["at"], name="audit_at"),
            models.Index(fields=["actor", "at"], name="audit_actor_at"),
            models.Index(fields=["target_type", "target_id"], name="audit_target"),
            models.Index(fields=["scope", "at"], name="audit_scope_at"),
        ]

    def __str__(self) -> str:
        return f"{self.get_action_display()}: {self.target_repr}"
