from typing import Protocol

from django.contrib.auth.models import AbstractUser
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from accounts.posix import validate_posix_username
from clusters.models import Cluster, Partition

posix_username_validator = RegexValidator(
    r"^[a-z_][a-z0-9_-]{0,31}$",
    _("A POSIX user name: lower-case letters, digits, '-' and '_', at most 32 characters."),
)
slurm_account_validator = RegexValidator(
    r"^[a-z][a-z0-9_-]{0,39}$",
    _("A Slurm account: lower-case letters, digits, '-' and '_', starting with a letter."),
)


def validate_slurm_account_not_root(account: str) -> None:
    # A project's account is one the portal creates, or one made by hand that an
    # allocation manager adopted (accounts.adoption); root is Slurm's own, above every
    # other, and can be neither.
    if account == "root":
        raise ValidationError(
            _(
                "root is Slurm's top account and no project's: choose a new account name, "
                "which the portal creates in Slurm, or adopt an account the site made."
            ),
            code="slurm_root",
        )


class User(AbstractUser):
    # Set by an administrator or the identity provider, never by the user:
    # it is the Unix login every job of this user runs as.
    posix_username = models.CharField(
        max_length=32,
        unique=True,
        null=True,
        blank=True,
        validators=[posix_username_validator, validate_posix_username],
        help_text=_("The Unix login this user's jobs run as (never root or a system account)."),
    )
    # Set when the directory sync found the user disabled or gone, and the user was
    # switched off for it; cleared when the directory has them again. A user an
    # administrator switched off (this empty) stays off whatever the directory says.
    directory_disabled_at = models.DateTimeField(null=True, blank=True, editable=False)

    class JobMail(models.TextChoices):
        ALL = "all", _("Every job")
        FAILURES = "failures", _("Failed jobs only")
        NEVER = "never", _("Never")

    # Which of their jobs' ends the user is mailed about (jobs.job_mail), and in which
    # language (empty: the portal's default).
    job_mail = models.CharField(max_length=8, choices=JobMail.choices, default=JobMail.FAILURES)
    mail_language = models.CharField(max_length=8, blank=True, default="")


class ExternalIdentity(models.Model):
    """Who a user is at the site's directory or identity provider: the key a sign-in is
    matched by (never the e-mail address nor the name typed at log-in)."""

    class Source(models.TextChoices):
        LDAP = "ldap", _("Directory (LDAP)")
        OIDC = "oidc", _("OpenID Connect")

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="identities")
    source = models.CharField(max_length=4, choices=Source.choices)
    # The directory's URL or the provider's issuer, and the entry's uid or the provider's
    # ``sub``: together unique, whatever else changes.
    issuer = models.CharField(max_length=200)
    subject = models.CharField(max_length=255)
    login = models.CharField(
        max_length=255, help_text=_("The name the user last signed in with there.")
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_sign_in_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = _("external identities")
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="identity_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.login} at {self.issuer}"


class Project(models.Model):
    """A team's budget; one Slurm account."""

    slug = models.SlugField(max_length=40, unique=True)
    name = models.CharField(max_length=200)
    slurm_account = models.CharField(
        max_length=40,
        unique=True,
        validators=[slurm_account_validator, validate_slurm_account_not_root],
        help_text=_(
            "The project's Slurm account: a new one, which the portal creates, or one made by "
            "hand that an allocation manager adopts (Slurm import); never root. The reconciler "
            "changes an account made by hand only on the clusters where it was adopted."
        ),
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

    class Source(models.TextChoices):
        MANUAL = "manual", _("Made by hand")
        DIRECTORY = "directory", _("From a directory group")

    role = models.CharField(max_length=8, choices=Role.choices, default=Role.MEMBER)
    # The group sync adds, changes and removes only the memberships it made; one made by
    # hand (console, API) is never touched by it.
    source = models.CharField(max_length=9, choices=Source.choices, default=Source.MANUAL)
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
    # Cached totals of the allocation's ledger entries, in integer GPU-seconds (no
    # rounding drift), written in the same transaction as each entry and
    # checkable against the sums (accounts.selectors.ledger_drift).
    granted_gpu_seconds = models.BigIntegerField(default=0)  # grants and adjustments
    used_gpu_seconds = models.BigIntegerField(default=0)  # charges
    held_gpu_seconds = models.BigIntegerField(default=0)  # holds not yet released
    expired_gpu_seconds = models.BigIntegerField(default=0)  # lapsed at the period's end
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-starts_on"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(ends_on__gt=models.F("starts_on")),
                name="allocation_ends_after_it_starts",
                violation_error_message=_("The period must end after it starts."),
            ),
            models.CheckConstraint(
                condition=models.Q(granted_gpu_seconds__gte=0)
                & models.Q(used_gpu_seconds__gte=0)
                & models.Q(held_gpu_seconds__gte=0)
                & models.Q(expired_gpu_seconds__gte=0),
                name="allocation_totals_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project} on {self.cluster}: {self.granted_gpu_hours:g} GPU-h"

    @property
    def granted_gpu_hours(self) -> float:
        return self.granted_gpu_seconds / 3600

    @property
    def available_gpu_seconds(self) -> int:
        return available_gpu_seconds(self)


# The balance, defined once: an allocation's four cached totals, what is available from
# them (in Python for a row or a sum, in SQL for a query), and which total each kind of
# ledger entry moves (LEDGER_TOTALS, below). The ledger, the selectors, the admin, the
# API and the drift check all use these.
BALANCE_FIELDS = (
    "granted_gpu_seconds",
    "used_gpu_seconds",
    "held_gpu_seconds",
    "expired_gpu_seconds",
)


class HasTotals(Protocol):
    @property
    def granted_gpu_seconds(self) -> int: ...
    @property
    def used_gpu_seconds(self) -> int: ...
    @property
    def held_gpu_seconds(self) -> int: ...
    @property
    def expired_gpu_seconds(self) -> int: ...


def available_gpu_seconds(totals: HasTotals) -> int:
    """Granted, less used, held and lapsed: what new jobs can still use."""
    return (
        totals.granted_gpu_seconds
        - totals.used_gpu_seconds
        - totals.held_gpu_seconds
        - totals.expired_gpu_seconds
    )


AVAILABLE_GPU_SECONDS = (
    models.F("granted_gpu_seconds")
    - models.F("used_gpu_seconds")
    - models.F("held_gpu_seconds")
    - models.F("expired_gpu_seconds")
)


class LedgerEntry(models.Model):
    """One movement of GPU-seconds on an allocation. Append-only: a database
    trigger refuses UPDATE and DELETE, so the books can only grow."""

    class Kind(models.TextChoices):
        GRANT = "grant", _("Grant")
        ADJUST = "adjust", _("Adjustment")
        HOLD = "hold", _("Hold")
        RELEASE = "release", _("Release")
        CHARGE = "charge", _("Charge")
        EXPIRE = "expire", _("Expiry")

    allocation = models.ForeignKey(Allocation, on_delete=models.PROTECT, related_name="entries")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    # Signed: what the entry does to the available balance (a hold or charge is
    # negative, a release positive), so available is the plain sum.
    gpu_seconds = models.BigIntegerField()
    # What it concerns, opaque to the bank: a job's submit token for holds and
    # releases, "cluster:slurm_job_id" for charges. A repeat is a no-op.
    reference = models.CharField(max_length=200, blank=True)
    actor = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.PROTECT, related_name="ledger_entries"
    )
    reason = models.TextField(blank=True)
    # Whose work and where, on holds and charges: the axes of the usage reports.
    user = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.PROTECT, related_name="usage_entries"
    )
    partition = models.ForeignKey(
        Partition, null=True, blank=True, on_delete=models.PROTECT, related_name="ledger_entries"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "ledger entries"
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "reference"],
                condition=~models.Q(reference=""),
                name="ledger_entry_once_per_reference",
            ),
            models.CheckConstraint(
                condition=(
                    models.Q(kind="grant", gpu_seconds__gt=0)
                    | models.Q(kind="release", gpu_seconds__gte=0)
                    | models.Q(kind__in=["hold", "charge", "expire"], gpu_seconds__lte=0)
                    | models.Q(kind="adjust")
                ),
                name="ledger_entry_sign_matches_kind",
            ),
        ]
        indexes = [
            models.Index(fields=["allocation", "kind"], name="ledger_allocation_kind"),
            # A member's use of an allocation (accounts.caps.member_use), under the hold's lock.
            models.Index(fields=["allocation", "user", "kind"], name="ledger_allocation_user_kind"),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.gpu_seconds / 3600:+g} GPU-h"


# Which cached total each kind of entry moves, and with which sign of its gpu_seconds
# (a hold's or a charge's gpu_seconds are negative: they lower the balance).
LEDGER_TOTALS = {
    LedgerEntry.Kind.GRANT: ("granted_gpu_seconds", 1),
    LedgerEntry.Kind.ADJUST: ("granted_gpu_seconds", 1),
    LedgerEntry.Kind.HOLD: ("held_gpu_seconds", -1),
    LedgerEntry.Kind.RELEASE: ("held_gpu_seconds", -1),
    LedgerEntry.Kind.CHARGE: ("used_gpu_seconds", -1),
    LedgerEntry.Kind.EXPIRE: ("expired_gpu_seconds", -1),
}


class AllocationRequest(models.Model):
    """GPU-hours asked for by a PI or co-PI; an allocation manager decides."""

    class State(models.TextChoices):
        PENDING = "pending", _("Pending")
        APPROVED = "approved", _("Approved")
        DENIED = "denied", _("Denied")

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="requests")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="requests")
    requested_by = models.ForeignKey(
        User, on_delete=models.PROTECT, related_name="allocation_requests"
    )
    gpu_hours = models.PositiveIntegerField(
        validators=[MinValueValidator(1, _("Ask for at least one GPU-hour."))]
    )
    starts_on = models.DateField()
    ends_on = models.DateField()
    justification = models.TextField()
    state = models.CharField(max_length=8, choices=State.choices, default=State.PENDING)
    decided_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.PROTECT, related_name="decided_requests"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_comment = models.TextField(blank=True)
    allocation = models.OneToOneField(
        Allocation, null=True, blank=True, on_delete=models.PROTECT, related_name="request"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(gpu_hours__gt=0), name="allocation_request_asks_for_hours"
            ),
            models.CheckConstraint(
                condition=models.Q(ends_on__gt=models.F("starts_on")),
                name="allocation_request_ends_after_it_starts",
                violation_error_message=_("The period must end after it starts."),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_hours:,} GPU-h for {self.project} ({self.get_state_display()})"


class Notification(models.Model):
    """A notice about an allocation mailed to its project's PIs and co-PIs: at most
    one of each kind per allocation. The row is claimed before the mails go out
    and marked sent after (accounts.notifications)."""

    class Kind(models.TextChoices):
        # xgettext:no-python-format (a literal %: xgettext would take "% o" for a directive)
        USAGE_80 = "usage_80", _("80% of the GPU-hours used")
        USAGE_100 = "usage_100", _("All GPU-hours used")
        EXPIRES_SOON = "expires_soon", _("Ends within 14 days")

    allocation = models.ForeignKey(
        Allocation, on_delete=models.CASCADE, related_name="notifications"
    )
    kind = models.CharField(max_length=12, choices=Kind.choices)
    claimed_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)
    # The addresses it went to, for the record (empty: nobody had an address).
    recipients = models.TextField(blank=True)

    class Meta:
        ordering = ["-claimed_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["allocation", "kind"], name="notification_once_per_allocation_and_kind"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.allocation}"


class PersonalAccessToken(models.Model):
    """A script's credential for the REST API (``Authorization: Bearer sgp_…``).

    Only the SHA-256 of the token is kept: the secret is shown once, when it is
    made, and a copy of the database cannot be used to call the API. The
    secret is 256 random bits, so a plain (unsalted) hash is enough and lets a
    request find its token by one indexed look-up.
    """

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="access_tokens")
    name = models.CharField(max_length=100)
    # The token's first characters, kept to tell a user's tokens apart; not a secret.
    prefix = models.CharField(max_length=16)
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "-created_at"], name="access_token_user_recent")]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…) of {self.user}"


class ReconcileReport(models.Model):
    """What the last reconcile run of a cluster found: the drift page shows it, so the
    web tier asks Slurm nothing. One row per cluster, replaced by every run."""

    cluster = models.OneToOneField(
        Cluster, on_delete=models.CASCADE, related_name="reconcile_report"
    )
    ran_at = models.DateTimeField()
    dry_run = models.BooleanField(default=False)
    # [{"account": "vision", "change": "vision: add user alice"}, …], as Action prints them.
    actions = models.JSONField(default=list)
    errors = models.JSONField(default=list)
    warnings = models.JSONField(default=list)
    # {"vision": {"share": 0.2, "usage": 0.09}, …}: each project account's fair-share
    # standing (sshare's NormShares and EffectvUsage) when the run read its usage.
    standings = models.JSONField(default=dict)

    def __str__(self) -> str:
        return f"reconcile of {self.cluster} at {self.ran_at:%Y-%m-%d %H:%M}"


class AdoptedAccount(models.Model):
    """A Slurm account a site made by hand that an allocation manager handed to the
    portal on one cluster, bound to the project of that account name. The reconciler
    manages it there as its own (members, limits); on other clusters it stays the site's.
    Written by ``accounts.adoption.account_adopt`` (audited), never changed after."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="adoptions")
    account = models.CharField(max_length=40)  # the project's slurm_account
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="adoptions")
    adopted_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    adopted_at = models.DateTimeField(default=timezone.now)
    # The safe default keeps them: users the site associated with the account who were
    # not the project's members when it was adopted go on working under it, unless the
    # manager confirmed their removal. Anyone else the reconciler keeps in step with the
    # project's members, as on the portal's own accounts (a member who leaves loses it).
    remove_other_users = models.BooleanField(
        default=False,
        help_text=_(
            "Whether the reconciler removes the associations of users who are not the "
            "project's members; if not, it keeps those the site had given the account."
        ),
    )
    kept_users = models.JSONField(
        default=list,
        blank=True,
        help_text=_("The site's users the reconciler keeps on the account: not members."),
    )

    class Meta:
        ordering = ["cluster__name", "account"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "account"], name="adopted_account_once_per_cluster"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.account} on {self.cluster} (adopted into {self.project})"


class SlurmAccountListing(models.Model):
    """The accounts a cluster already has, as a worker (or ``manage.py import_accounts``)
    last listed them, with what adopting each would change: the import page shows it, so
    the web tier asks Slurm nothing. One row per cluster, replaced by every listing."""

    cluster = models.OneToOneField(
        Cluster, on_delete=models.CASCADE, related_name="account_listing"
    )
    listed_at = models.DateTimeField()
    # [{"name", "description", "organization", "parent", "users", "limits": {...},
    #   "project", "changes", "others", "problem"}, …]: accounts.adoption.listing_row.
    accounts = models.JSONField(default=list)
    error = models.TextField(blank=True)  # why Slurm could not be listed

    def __str__(self) -> str:
        return f"accounts of {self.cluster} at {self.listed_at:%Y-%m-%d %H:%M}"


class Webhook(models.Model):
    """A URL told of events (accounts.webhooks): a user's, for their own jobs ending, or a
    project's, registered by its PI or a co-PI, for its jobs and its allocations.

    The secret signs every delivery, so the portal must be able to compute the HMAC:
    it is kept as it is in this table (unlike an access token, of which only a hash is
    kept), shown to its owner once, when the hook is made, and never again.
    """

    class Event(models.TextChoices):
        JOB_ENDED = "job.ended", _("A job ended")
        # xgettext:no-python-format (a literal %: xgettext would take "% o" for a directive)
        USAGE_80 = "allocation.usage_80", _("80% of an allocation's GPU-hours used")
        USAGE_100 = "allocation.usage_100", _("All of an allocation's GPU-hours used")
        EXPIRES_SOON = "allocation.expires_soon", _("An allocation ends within 14 days")
        MEMBER_CAP_REACHED = "member.cap_reached", _("A member reached their cap")

    class Format(models.TextChoices):
        JSON = "json", _("JSON")
        SLACK = "slack", _("Slack-compatible")

    # Exactly one of user and project: whose hook it is.
    user = models.ForeignKey(
        User, on_delete=models.CASCADE, null=True, blank=True, related_name="webhooks"
    )
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, null=True, blank=True, related_name="webhooks"
    )
    created_by = models.ForeignKey(
        User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    url = models.URLField(max_length=500)
    events = models.JSONField(default=list)
    format = models.CharField(max_length=5, choices=Format.choices, default=Format.JSON)
    secret = models.CharField(max_length=80)
    created_at = models.DateTimeField(auto_now_add=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(user__isnull=False, project__isnull=True)
                | models.Q(user__isnull=True, project__isnull=False),
                name="webhook_of_a_user_or_a_project",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.url} of {self.user or self.project}"


class WebhookDelivery(models.Model):
    """One event for one hook, tried until delivered or given up (accounts.webhooks)."""

    class State(models.TextChoices):
        PENDING = "pending", _("Pending")
        DELIVERED = "delivered", _("Delivered")
        FAILED = "failed", _("Failed")

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=32)
    payload = models.JSONField()
    text = models.CharField(max_length=1000, blank=True)
    state = models.CharField(max_length=9, choices=State.choices, default=State.PENDING)
    created_at = models.DateTimeField(auto_now_add=True)
    attempts = models.PositiveIntegerField(default=0)
    # When the next try is due; a worker trying it moves it ahead (a lease) first.
    next_try_at = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_status = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["state", "next_try_at"], name="webhook_delivery_due")]

    def __str__(self) -> str:
        return f"{self.event} to {self.webhook_id} ({self.state})"


class MemberCap(models.Model):
    """The most GPU-hours one member may spend of an allocation, or (no user) every
    member's default: a PI's "my student may burn at most 200 of our 1,000". A member's
    own cap wins over the default. Set by the project's PI and co-PIs or an allocation
    manager (``accounts.caps``, audited), enforced with the project's hold and pushed
    into Slurm as the member's own association limit by the reconciler."""

    allocation = models.ForeignKey(Allocation, on_delete=models.CASCADE, related_name="caps")
    user = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.CASCADE, related_name="caps"
    )
    # Whole GPU-seconds, as the ledger counts (a cap of 0 stops the member's new work).
    gpu_seconds = models.BigIntegerField()
    set_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["allocation", "user__username"]
        constraints = [
            models.UniqueConstraint(
                fields=["allocation", "user"],
                condition=models.Q(user__isnull=False),
                name="member_cap_once_per_member",
            ),
            models.UniqueConstraint(
                fields=["allocation"],
                condition=models.Q(user__isnull=True),
                name="member_cap_one_default",
            ),
            models.CheckConstraint(
                condition=models.Q(gpu_seconds__gte=0), name="member_cap_not_negative"
            ),
        ]

    def __str__(self) -> str:
        who = self.user or _("every member")
        return f"{who}: at most {self.gpu_seconds / 3600:g} GPU-h of {self.allocation}"

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600


class CapReached(models.Model):
    """A member's charges reaching their cap on an allocation, announced once per cap
    value (to the project's ``member.cap_reached`` webhooks): a cap raised and reached
    again is news again (accounts.caps.caps_reached_announce)."""

    allocation = models.ForeignKey(
        Allocation, on_delete=models.CASCADE, related_name="caps_reached"
    )
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    cap_gpu_seconds = models.BigIntegerField()
    reached_at = models.DateTimeField()

    class Meta:
        ordering = ["-reached_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["allocation", "user", "cap_gpu_seconds"], name="cap_reached_once_per_cap"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} reached {self.cap_gpu_seconds / 3600:g} GPU-h of {self.allocation}"
