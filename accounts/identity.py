"""Who signed in, in the portal's terms: one user per person, whatever the way in.

The directory (``accounts.ldap_login``) and the identity provider (``accounts.oidc``)
each describe the person who signed in as a ``Person``; ``sign_in`` turns that into the
portal's user, created on the first sign-in. Everything that decides who a job runs as
comes from the source, never from the request: the Unix login is the directory's
attribute or the provider's claim, set again on every sign-in; it must be a person's
login (not root, not a system account) and exist where jobs are submitted, as the
workers see it; and with both a provider and a directory, the two must name the same
login. A provider's sign-in counts only with what the portal asked for: every scope it
asked for granted (when the provider says what it granted), and the claim the directory
is matched by (``PORTAL_OIDC_DIRECTORY_MATCH``) present and not unverified; the claimed
login is never the key the directory is searched by then. A sign-in links to an account
made another way only when that account is an ordinary person's: never automatically to
a staff, superuser or allocation manager's account, nor to one another identity of the
same source signs in to (a manager links those: ``identity_link``, audited). A refusal
tells the person what to do and the operator, in the log, why.
"""

import logging
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts import directory
from accounts.directory_groups import memberships_follow_groups
from accounts.errors import NotAllowed, Refused
from accounts.models import ExternalIdentity, User, posix_username_validator
from accounts.permissions import is_allocation_manager
from accounts.posix import validate_posix_username
from audit.models import AuditEvent
from audit.services import audit_record
from clusters.workers import ask

logger = logging.getLogger(__name__)

POSIX_SURVEY = "accounts.tasks.posix_login_survey_task"
# How long a sign-in waits for a worker to say where the login exists.
POSIX_SURVEY_DEADLINE_S = 5.0


@dataclass(frozen=True)
class Claim:
    """One of the provider's claims the portal relies on, as the sign-in carried it."""

    name: str
    value: str  # empty: the sign-in did not carry it
    # False when the provider says it has not verified it (``<name>_verified``, as
    # ``email_verified``); a provider that says nothing of it vouches for what it sends.
    verified: bool = True


def directory_match() -> tuple[str, str] | None:
    """(the provider's claim, the directory's attribute) a provider's person is found by
    in the directory (``PORTAL_OIDC_DIRECTORY_MATCH``, e.g. ``email=mail``); None: the
    operator chose to look them up by the Unix login claim alone."""
    claim, _sep, attribute = settings.OIDC_DIRECTORY_MATCH.partition("=")
    return (claim.strip(), attribute.strip()) if claim.strip() and attribute.strip() else None


@dataclass(frozen=True)
class Person:
    """A person as the directory or the identity provider describes them at sign-in."""

    source: str  # ExternalIdentity.Source
    issuer: str  # the directory's URL or the provider's issuer
    subject: str  # the directory entry's DN or the provider's ``sub``
    login: str  # the name they signed in with there
    posix_username: str
    email: str = ""
    first_name: str = ""
    last_name: str = ""
    # None: the source said nothing of groups (memberships are left as they are).
    groups: frozenset[str] | None = None
    disabled: bool = False
    # A provider's sign-in only: the claim ``directory_match`` names, as it came (None
    # when no match is configured), and the scopes the portal asked for that the
    # provider said it did not grant.
    directory_key: Claim | None = None
    scopes_not_granted: frozenset[str] = frozenset()


class SignInRefused(Exception):
    """``message`` is for the person signing in; ``reason`` for the operator's log."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


def _refuse(person: Person, message: str, reason: str) -> SignInRefused:
    logger.warning(
        "sign-in refused: %s %r at %s (Unix login %r): %s",
        person.source,
        person.login,
        person.issuer,
        person.posix_username,
        reason,
    )
    return SignInRefused(message, reason=reason)


def sign_in(person: Person) -> User:
    """The portal user ``person`` is, made or brought up to date; SignInRefused when
    they may not sign in (the message says what to do)."""
    if person.source == ExternalIdentity.Source.OIDC:
        _check_grant(person)
    _check_login(person)
    if person.source == ExternalIdentity.Source.OIDC and directory.configured():
        _check_against_directory(person)
    _check_where_jobs_run(person)
    user = _user_for(person)
    if person.groups is not None:
        memberships_follow_groups(user, person.groups)
    return user


def _check_login(person: Person) -> None:
    name = person.posix_username
    ask_admin = _("Ask your site's administrators to give your account a Unix login.")
    if person.disabled:
        raise _refuse(
            person,
            _("Your account is disabled in the site's directory; ask its administrators."),
            "disabled in the directory (shadowExpire)",
        )
    if not name:
        raise _refuse(
            person,
            _("Your sign-in did not say which Unix login is yours.") + " " + ask_admin,
            f"no Unix login ({person.source}: claim or attribute empty)",
        )
    try:
        posix_username_validator(name)
        validate_posix_username(name)
    except ValidationError as error:
        raise _refuse(
            person,
            _("Your account's Unix login cannot run jobs.") + " " + ask_admin,
            f"the Unix login is refused: {' '.join(error.messages)}",
        ) from None


def _check_grant(person: Person) -> None:
    """Every scope the portal asked the provider for was granted: a sign-in whose request
    was cut down (the ``scope`` of ``/oidc/start/``'s redirect edited) is not one the
    portal asked for."""
    if person.scopes_not_granted:
        scopes = " ".join(sorted(person.scopes_not_granted))
        raise _refuse(
            person,
            _(
                "Signing in with %(name)s did not grant everything the portal asks for "
                "(%(scopes)s missing). Sign in again from the portal's log-in page, without "
                "changing the request, and allow all of it."
            )
            % {"name": settings.OIDC_NAME, "scopes": scopes},
            f"the provider did not grant the scopes {scopes!r} of PORTAL_OIDC_SCOPES",
        )


def _claim_label(name: str) -> str:
    return _("e-mail address") if name == "email" else name


def _check_against_directory(person: Person) -> None:
    """The provider's Unix login must be the one the directory has for the person, whom
    the directory finds by the configured claim, present and verified: never by the
    claimed login itself (that would always agree)."""
    match = directory_match()
    if match is None:  # the operator's choice: the directory vouches for the login alone
        attribute, value = settings.LDAP_POSIX_ATTRIBUTE, person.posix_username
    else:
        claim, attribute = match
        key = person.directory_key
        value = key.value if key is not None and key.name == claim else ""
        if not value:
            raise _refuse(
                person,
                _(
                    "Your sign-in did not include your %(claim)s, which the portal needs to "
                    "find you in the site's directory. Sign in again from the portal's log-in "
                    "page and allow %(name)s to share it."
                )
                % {"claim": _claim_label(claim), "name": settings.OIDC_NAME},
                f"no {claim!r} claim, which PORTAL_OIDC_DIRECTORY_MATCH matches with the "
                f"directory's {attribute!r} (a scope left out?)",
            )
        if key is not None and not key.verified:
            raise _refuse(
                person,
                _(
                    "Your %(claim)s is not verified at %(name)s, so the portal cannot find you "
                    "by it in the site's directory. Verify it there, then sign in again."
                )
                % {"claim": _claim_label(claim), "name": settings.OIDC_NAME},
                f"the {claim!r} claim {value!r} is not verified ({claim}_verified)",
            )
    try:
        entry = directory.person_where(attribute, value)
    except directory.DirectoryUnavailable as error:
        raise _refuse(
            person,
            _("Signing in is not possible now: the directory does not answer. Try again later."),
            str(error),
        ) from None
    if entry is None:
        raise _refuse(
            person,
            _("Your account is not in the site's directory; ask its administrators."),
            f"no one (or more than one) in the directory with {attribute}={value!r}",
        )
    if entry.posix_username != person.posix_username:
        raise _refuse(
            person,
            _(
                "Your sign-in and the site's directory name different Unix logins; ask the "
                "site's administrators to correct one of them."
            ),
            f"the provider says Unix login {person.posix_username!r}, the directory "
            f"entry {entry.dn} says {entry.posix_username!r}",
        )
    if entry.disabled:
        raise _refuse(
            person,
            _("Your account is disabled in the site's directory; ask its administrators."),
            f"the directory entry {entry.dn} is disabled (shadowExpire)",
        )


def _check_where_jobs_run(person: Person) -> None:
    """The workers look the login up where each cluster's jobs are submitted; it must be
    a person's on at least one. No answer in time: the sign-in goes on (the worker
    checks again before every submission)."""
    answers = ask(
        POSIX_SURVEY, deadline_s=POSIX_SURVEY_DEADLINE_S, posix_username=person.posix_username
    )
    if not isinstance(answers, dict) or not answers:
        logger.warning(
            "sign-in of %r: no worker said where %r exists; checked again at submission",
            person.login,
            person.posix_username,
        )
        return
    if any(refusal is None for refusal in answers.values()):
        return
    if any(str(refusal).startswith("unknown:") for refusal in answers.values()):
        # The login may be on a cluster that could not be asked: not a no.
        logger.warning("sign-in of %r: %s", person.login, "; ".join(map(str, answers.values())))
        return
    raise _refuse(
        person,
        _(
            "Your Unix login %(login)s cannot run jobs on any of the portal's clusters; ask "
            "the site's administrators."
        )
        % {"login": person.posix_username},
        "; ".join(f"{cluster}: {refusal}" for cluster, refusal in answers.items()),
    )


def _user_for(person: Person) -> User:
    now = timezone.now()
    try:
        with transaction.atomic():
            identity = (
                ExternalIdentity.objects.select_for_update()
                .select_related("user")
                .filter(issuer=person.issuer, subject=person.subject)
                .first()
            )
            user = identity.user if identity else _user_by_login(person)
            if user is None:
                user = _user_create(person)
            else:
                _user_update(user, person)
            if identity is None:
                identity = ExternalIdentity(
                    user=user, source=person.source, issuer=person.issuer, subject=person.subject
                )
            identity.login = person.login[:255]
            identity.last_sign_in_at = now
            identity.save()
    except IntegrityError:
        # Another sign-in of the same person made the user or identity a moment ago.
        raise _refuse(
            person,
            _("Signing in did not finish; try again."),
            "a concurrent sign-in of the same person",
        ) from None
    return user


def _user_by_login(person: Person) -> User | None:
    """A user made by hand (or by the other source) with this Unix login, or with it as
    their user name and no login yet: the same person, now signing in this way; but
    never by itself an account that may do more than a researcher's, nor one another
    identity of this source signs in to (``why_not_linked``)."""
    name = person.posix_username
    user = User.objects.select_for_update().filter(posix_username=name).first()
    if user is None:
        user = User.objects.select_for_update().filter(username=name).first()
        if user is not None and user.posix_username:
            raise _refuse(
                person,
                _(
                    "A portal account with your name belongs to someone else; ask the "
                    "administrators."
                ),
                f"the user {user.username!r} has another Unix login, {user.posix_username!r}",
            )
    if user is not None and (why := why_not_linked(user, source=person.source)):
        raise _refuse(
            person,
            _(
                "The portal account with your Unix login is not linked to this sign-in, "
                "and the portal does not link it by itself; ask an allocation manager to "
                "link it."
            ),
            f"the user {user.username!r} {why}; a manager links it in the console (External "
            f"identities: subject {person.subject!r}) or with manage.py identity_link "
            f"{user.username} --source {person.source} --subject {person.subject} --by <manager>",
        )
    return user


def why_not_linked(user: User, *, source: str) -> str:
    """Why a sign-in of ``source`` may not take ``user``'s account by itself: it may do
    more than a researcher's, or another identity of that source signs in to it ("": it
    may)."""
    if privilege := _privilege(user):
        return f"is {privilege}"
    if other := user.identities.filter(source=source).first():
        return f"is already signed in to as {other.subject!r} at {other.issuer}"
    return ""


def _privilege(user: User) -> str:
    """What ``user`` may do beyond a researcher, in words ("": nothing)."""
    if user.is_superuser:
        return "a superuser"
    if user.is_staff:
        return "staff"
    if is_allocation_manager(user):
        return "an allocation manager"
    return ""


def may_link(*, actor: User, user: User) -> None:
    """NotAllowed unless ``actor`` may link a sign-in to ``user``'s account: allocation
    managers link ordinary accounts and their own; another privileged account, or a
    superuser's, only a superuser (a manager never makes a way into another's rights)."""
    if not is_allocation_manager(actor):
        raise NotAllowed(_("Only allocation managers link sign-ins to accounts."))
    if _privilege(user) and not actor.is_superuser and (user.pk != actor.pk or user.is_superuser):
        raise NotAllowed(
            _("Only a superuser links a sign-in to another privileged account, or a superuser's.")
        )


def identity_link(
    *, actor: User, user: User, source: str, subject: str, issuer: str = "", login: str = ""
) -> ExternalIdentity:
    """``actor`` says that whoever signs in as ``subject`` at the directory or provider
    (``source``; ``issuer``: the configured one) is ``user``: how the accounts a sign-in
    never takes by itself are linked (by ``may_link``'s rule). Audited; a repeat has no
    second effect. NotAllowed or Refused (the message says why)."""
    source = ExternalIdentity.Source(source)
    issuer = issuer or (
        settings.LDAP_URL if source == ExternalIdentity.Source.LDAP else settings.OIDC_ISSUER
    )
    if not (issuer and subject.strip()):
        raise Refused(_("Name the identity to link: its source, issuer and subject."))
    may_link(actor=actor, user=user)
    with transaction.atomic():
        identity = (
            ExternalIdentity.objects.select_for_update()
            .select_related("user")
            .filter(issuer=issuer, subject=subject)
            .first()
        )
        if identity is not None:
            if identity.user_id == user.pk:
                return identity
            raise Refused(
                _("That sign-in is linked to %(other)s already.") % {"other": identity.user}
            )
        identity = ExternalIdentity.objects.create(
            user=user, source=source, issuer=issuer, subject=subject, login=login[:255]
        )
        audit_record(
            actor=actor,
            action=AuditEvent.Action.USER_IDENTITY_LINK,
            target=user,
            on_behalf_of=user,
            detail={"source": source, "issuer": issuer, "subject": subject, "login": login},
        )
    logger.info("%s linked %s %r at %s to the user %s", actor, source, subject, issuer, user)
    return identity


def _user_create(person: Person) -> User:
    user = User(
        username=person.posix_username,
        posix_username=person.posix_username,
        email=person.email,
        first_name=person.first_name[:150],
        last_name=person.last_name[:150],
    )
    user.set_unusable_password()  # the portal keeps no password for them
    user.save()
    audit_record(
        actor=None,
        action=AuditEvent.Action.USER_CREATE,
        target=user,
        detail={"source": person.source, "issuer": person.issuer, "login": person.login},
    )
    logger.info("user %s created at their first sign-in (%s %r)", user, person.source, person.login)
    return user


def _user_update(user: User, person: Person) -> None:
    if not user.is_active and user.directory_disabled_at is None:
        raise _refuse(
            person,
            _("Your portal account is switched off; ask the portal's administrators."),
            f"the user {user.username!r} was switched off by an administrator",
        )
    changed = []
    if user.posix_username != person.posix_username:
        if User.objects.filter(posix_username=person.posix_username).exclude(pk=user.pk).exists():
            raise _refuse(
                person,
                _("Your Unix login belongs to another portal account; ask the administrators."),
                f"Unix login {person.posix_username!r} is another user's",
            )
        audit_record(
            actor=None,
            action=AuditEvent.Action.USER_POSIX_CHANGE,
            target=user,
            detail={"was": user.posix_username, "now": person.posix_username},
        )
        user.posix_username = person.posix_username
        changed.append("posix_username")
    for field, value in (
        ("email", person.email),
        ("first_name", person.first_name[:150]),
        ("last_name", person.last_name[:150]),
    ):
        if value and getattr(user, field) != value:
            setattr(user, field, value)
            changed.append(field)
    if not user.is_active:  # switched off by the directory sync, and back now
        user.is_active = True
        user.directory_disabled_at = None
        changed += ["is_active", "directory_disabled_at"]
        audit_record(
            actor=None,
            action=AuditEvent.Action.USER_ENABLE,
            target=user,
            detail={"source": person.source},
        )
    if changed:
        user.save(update_fields=changed)
