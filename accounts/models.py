from django.contrib.auth.models import AbstractUser
from django.core.validators import RegexValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from clusters.models import Cluster

posix_username_validator = RegexValidator(
    r"^[a-z_][a-z0-9_-]{0,31}$",
    _("A POSIX user name: lower-case letters, digits, '-' and '_', at most 32 characters."),
)
slurm_account_validator = RegexValidator(
    r"^[a-z][a-z0-9_-]{0,39}$",
    _("A Slurm account: lower-case letters, digits, '-' and '_', starting with a letter."),
)


class User(AbstractUser):
    # Set by an administrator or the identity provider, never by the user:
    # it is the Unix login every job of this user runs as.
    posix_username = models.CharField(
        max_length=32,
        unique=True,
        null=True,
        blank=True,
        validators=[posix_username_validator],
        help_text=_("The Unix login this user's jobs run as."),
    )


class Project(models.Model):
    """A team's budget; one Slurm account."""

    slug = models.SlugField(max_length=40, unique=True)
    name = models.CharField(max_length=200)
    slurm_account = models.CharField(
        max_length=40, unique=True, validators=[slurm_account_validator]
    )
    description = models.TextField(blank=True)
    members = models.ManyToManyField(User, through="Membership", related_name="projects")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    class Role(models.TextChoices):
        PI = "pi", _("PI")
        CO_PI = "co_pi", _("Co-PI")
        MEMBER = "member", _("Member")

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "user"], name="membership_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.project} ({self.get_role_display()})"


class Allocation(models.Model):
    """GPU-hours granted to a project on a cluster for a period."""

    class State(models.TextChoices):
        PENDING = "pending", _("Pending")
        ACTIVE = "active", _("Active")
        EXPIRED = "expired", _("Expired")
        REVOKED = "revoked", _("Revoked")

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="allocations")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="allocations")
    state = models.CharField(max_length=8, choices=State.choices, default=State.PENDING)
    starts_on = models.DateField()
    ends_on = models.DateField()
    # Integer GPU-seconds: no rounding drift. The ledger (a later issue)
    # becomes the source of truth; this stays as its cached total.
    granted_gpu_seconds = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-starts_on"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(ends_on__gt=models.F("starts_on")),
                name="allocation_ends_after_it_starts",
            ),
            models.CheckConstraint(
                condition=models.Q(granted_gpu_seconds__gt=0),
                name="allocation_grants_hours",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project} on {self.cluster}: {self.granted_gpu_hours:g} GPU-h"

    @property
    def granted_gpu_hours(self) -> float:
        return self.granted_gpu_seconds / 3600
