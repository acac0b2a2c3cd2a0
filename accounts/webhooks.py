"""Webhooks: a URL told, in a signed POST, when something happens.

A user's hook hears of their own jobs ending; a project's hook (registered by its PI
or a co-PI) hears of the project's jobs ending, its allocations at 80 % and 100 % and
about to end, and a member reaching their cap. ``webhook_event`` is the one way in:
it records one delivery per matching hook, in the caller's transaction, and a worker
sends it after the commit (never the web tier).

Every request carries ``X-SGP-Timestamp`` (Unix seconds) and ``X-SGP-Signature:
v1=<hex>``, the HMAC-SHA256 of ``"<timestamp>.<body>"`` with the hook's secret: a
receiver recomputes it, compares in constant time and refuses an old timestamp (a
replay). A delivery that fails (no answer, or a status other than 2xx) is tried
again after a delay that doubles, with jitter, up to ``WEBHOOK_MAX_ATTEMPTS``; a hook
that fails ``WEBHOOK_DISABLE_AFTER`` tries in a row is disabled and its owner told.
Addresses are checked where the request connects (accounts.webhook_http).

Claims: a worker takes a due delivery by moving its ``next_try_at`` ahead by a lease
and counting the try (a conditional update that only one worker wins); a worker that
dies leaves it due again when the lease ends, so a delivery is sent late rather than
never, and a receiver that keeps the worker until it is killed still uses up tries.
"""

import datetime as dt
import functools
import hashlib
import hmac
import ipaddress
import json
import logging
import secrets
import smtplib
import time
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import F, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts import webhook_http
from accounts.errors import NotAllowed, Refused
from accounts.metrics import mail_counted, webhook_try_counted
from accounts.models import Project, User, Webhook, WebhookDelivery
from accounts.permissions import is_lead, leads_of, led_project_ids

logger = logging.getLogger(__name__)

Event = Webhook.Event
USER_EVENTS = (Event.JOB_ENDED,)
PROJECT_EVENTS = tuple(Event)
TEST_EVENT = "ping"
MAX_HOOKS_PER_OWNER = 10
MAX_BACKOFF = dt.timedelta(hours=1)
# Longer than the delivery task may run (its time limit), so a live try is never taken.
CLAIM_LEASE = dt.timedelta(minutes=5)


def _allowed() -> list[webhook_http.IPNetwork]:
    return [ipaddress.ip_network(net) for net in settings.WEBHOOK_ALLOWED_NETWORKS]


def url_refusal(url: str) -> str | None:
    """Why ``url`` cannot be a hook's address, said when it is registered, or None: the
    scheme, the port, and an address written in it. A name is not resolved here (what it
    resolves to today proves nothing later); the check that counts is made where each
    delivery connects."""
    try:
        target = webhook_http.target_of(url)
        if webhook_http.is_literal(target.host):
            webhook_http.checked_address(
                target, allowed=_allowed(), resolver=webhook_http.system_resolver
            )
    except webhook_http.Refused as refusal:
        return str(refusal)
    return None


def signature(secret: str, timestamp: int, body: bytes) -> str:
    signed = f"{timestamp}.".encode() + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def webhooks_of(user: User) -> QuerySet[Webhook]:
    """The hooks ``user`` may see and delete: their own and those of projects they lead."""
    return Webhook.objects.filter(
        Q(user=user) | Q(project_id__in=led_project_ids(user))
    ).select_related("project", "user")


def webhook_create(
    *,
    actor: User,
    url: str,
    events: Iterable[str],
    format: str = Webhook.Format.JSON,
    project: Project | None = None,
) -> tuple[Webhook, str]:
    """Register a hook for ``actor`` (or for ``project``, which they must lead); the hook and
    its secret, which is shown to the caller this once."""
    events = list(dict.fromkeys(events))
    if project is not None and not is_lead(actor, project):
        raise NotAllowed(_("Only the project's PI or a co-PI registers its webhooks."))
    allowed = PROJECT_EVENTS if project is not None else USER_EVENTS
    if not events or any(event not in allowed for event in events):
        raise Refused(
            _("Choose events among: %(events)s.") % {"events": ", ".join(map(str, allowed))}
        )
    if format not in Webhook.Format.values:
        raise Refused(_("The format is json or slack."))
    if (why := url_refusal(url)) is not None:
        raise Refused(_("This address cannot receive webhooks: %(why)s.") % {"why": why})
    owned = Webhook.objects.filter(project=project) if project else actor.webhooks.all()
    if owned.count() >= MAX_HOOKS_PER_OWNER:
        raise Refused(
            _("At most %(limit)s webhooks each: delete one first.") % {"limit": MAX_HOOKS_PER_OWNER}
        )
    secret = "whsec_" + secrets.token_urlsafe(32)
    hook = Webhook.objects.create(
        user=None if project else actor,
        project=project,
        created_by=actor,
        url=url,
        events=events,
        format=format,
        secret=secret,
    )
    return hook, secret


def webhook_delete(*, webhook: Webhook) -> None:
    webhook.delete()


def _enqueue(delivery_ids: list[int]) -> None:
    from accounts.tasks import webhook_deliver_task

    for delivery_id in delivery_ids:
        transaction.on_commit(functools.partial(webhook_deliver_task.delay, delivery_id))


def webhook_event(
    kind: str,
    *,
    project: Project | int | None = None,
    user: User | int | None = None,
    payload: dict[str, Any],
    text: str = "",
) -> int:
    """Record a delivery of event ``kind`` for every live hook that asked for it (the
    project's; the user's own for their jobs); they are sent after the caller's
    transaction commits. How many deliveries were recorded."""
    project_id = project.pk if isinstance(project, Project) else project
    user_id = user.pk if isinstance(user, User) else user
    whose = Q(pk__in=[])
    if project_id is not None:
        whose |= Q(project_id=project_id)
    if user_id is not None and kind in USER_EVENTS:
        whose |= Q(user_id=user_id)
    hooks = Webhook.objects.filter(whose, disabled_at__isnull=True, events__contains=[kind])
    now = timezone.now()
    deliveries = WebhookDelivery.objects.bulk_create(
        WebhookDelivery(
            webhook=hook, event=kind, payload=payload, text=text[:1000], next_try_at=now
        )
        for hook in hooks
    )
    _enqueue([d.pk for d in deliveries])
    return len(deliveries)


def webhook_test_send(*, webhook: Webhook) -> WebhookDelivery:
    """Queue a ping to the hook (disabled or not: it is how an owner checks a fix)."""
    delivery = WebhookDelivery.objects.create(
        webhook=webhook,
        event=TEST_EVENT,
        payload={"hook": webhook.pk},
        text="Test delivery from the Slurm GPU Portal.",
        next_try_at=timezone.now(),
    )
    _enqueue([delivery.pk])
    return delivery


def _body(delivery: WebhookDelivery) -> bytes:
    if delivery.webhook.format == Webhook.Format.SLACK:
        document: dict[str, Any] = {"text": delivery.text or delivery.event}
    else:
        document = {
            "id": delivery.pk,
            "event": delivery.event,
            "created_at": delivery.created_at.isoformat(),
            "data": delivery.payload,
        }
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def _headers(delivery: WebhookDelivery, body: bytes, now: dt.datetime) -> dict[str, str]:
    timestamp = int(now.timestamp())
    return {
        "Content-Type": "application/json",
        "User-Agent": "slurm-gpu-portal-webhook/1",
        "X-SGP-Event": delivery.event,
        "X-SGP-Delivery": str(delivery.pk),
        "X-SGP-Timestamp": str(timestamp),
        "X-SGP-Signature": "v1=" + signature(delivery.webhook.secret, timestamp, body),
    }


def backoff(attempts: int) -> dt.timedelta:
    """The wait after ``attempts`` failed tries: doubling from the base, capped, and
    between half and all of it (jitter: many hooks failing at once do not retry at once)."""
    full = min(settings.WEBHOOK_RETRY_BASE_S * 2 ** (attempts - 1), MAX_BACKOFF.total_seconds())
    return dt.timedelta(seconds=full * secrets.SystemRandom().uniform(0.5, 1.0))


def _claim(delivery_id: int, now: dt.datetime) -> WebhookDelivery | None:
    claimed = WebhookDelivery.objects.filter(
        pk=delivery_id, state=WebhookDelivery.State.PENDING, next_try_at__lte=now
    ).update(next_try_at=now + CLAIM_LEASE, attempts=F("attempts") + 1)
    if not claimed:
        return None
    return WebhookDelivery.objects.select_related("webhook").get(pk=delivery_id)


def webhook_deliver(
    *,
    delivery_id: int,
    now: dt.datetime | None = None,
    resolver: webhook_http.Resolver | None = None,
) -> str | None:
    """Try one due delivery now; its state after, or None when it was not due (sent,
    given up, or another worker has it)."""
    now = now or timezone.now()
    delivery = _claim(delivery_id, now)
    if delivery is None:
        return None
    hook = delivery.webhook
    if hook.disabled_at is not None and delivery.event != TEST_EVENT:
        WebhookDelivery.objects.filter(pk=delivery.pk).update(
            state=WebhookDelivery.State.FAILED, last_error="the webhook is disabled"
        )
        return WebhookDelivery.State.FAILED
    if delivery.attempts > settings.WEBHOOK_MAX_ATTEMPTS:
        # The last try never recorded its outcome (its worker was killed: a receiver that
        # answers too slowly); it counted, as every claimed try does.
        return _record(delivery, status=None, error="the last try did not finish", now=now)
    body = _body(delivery)
    status, error = None, ""
    started = time.monotonic()
    try:
        status = webhook_http.post(
            hook.url,
            body=body,
            headers=_headers(delivery, body, now),
            allowed=_allowed(),
            resolver=resolver or webhook_http.system_resolver,
            timeout=settings.WEBHOOK_TIMEOUT_S,
        )
    except (webhook_http.Refused, webhook_http.SendFailed) as failure:
        error = str(failure)
    else:
        if not 200 <= status < 300:
            error = f"HTTP {status}"
    webhook_try_counted(delivery.event, sent=not error)
    logger.info(
        "webhook %s delivery %s (%s): %s in %.1fs",
        hook.pk,
        delivery.pk,
        delivery.event,
        error or status,
        time.monotonic() - started,
    )
    return _record(delivery, status=status, error=error, now=now)


def _record(delivery: WebhookDelivery, *, status: int | None, error: str, now: dt.datetime) -> str:
    attempts = delivery.attempts  # counted when it was claimed
    if not error:
        state = WebhookDelivery.State.DELIVERED
        next_try = None
    elif attempts >= settings.WEBHOOK_MAX_ATTEMPTS or delivery.event == TEST_EVENT:
        state, next_try = WebhookDelivery.State.FAILED, None
    else:
        state, next_try = WebhookDelivery.State.PENDING, now + backoff(attempts)
    with transaction.atomic():
        WebhookDelivery.objects.filter(pk=delivery.pk).update(
            state=state,
            attempts=attempts,
            next_try_at=next_try,
            last_attempt_at=now,
            last_status=status,
            last_error=error[:500],
        )
        hook = Webhook.objects.select_for_update().filter(pk=delivery.webhook_id).first()
        if hook is None:
            return state  # deleted while the request was out, with its deliveries
        if not error:
            # A success (a test delivery, when the hook is disabled) turns it back on.
            hook.consecutive_failures, hook.disabled_at, hook.disabled_reason = 0, None, ""
            hook.save(update_fields=["consecutive_failures", "disabled_at", "disabled_reason"])
            return state
        hook.consecutive_failures += 1
        disable = (
            hook.disabled_at is None and hook.consecutive_failures >= settings.WEBHOOK_DISABLE_AFTER
        )
        if disable:
            hook.disabled_at = now
            hook.disabled_reason = (
                f"Disabled after {hook.consecutive_failures} failed deliveries in a row; "
                f"the last: {error}"
            )[:500]
            # Its other pending deliveries would only fail too.
            hook.deliveries.filter(state=WebhookDelivery.State.PENDING).exclude(
                pk=delivery.pk
            ).update(state=WebhookDelivery.State.FAILED, last_error="the webhook is disabled")
        hook.save(update_fields=["consecutive_failures", "disabled_at", "disabled_reason"])
    if disable:
        _tell_disabled(hook)
    return state


def _owners(hook: Webhook) -> list[User]:
    if hook.user is not None:
        return [hook.user]
    return [membership.user for membership in leads_of({hook.project_id})]  # type: ignore[arg-type]


def _tell_disabled(hook: Webhook) -> None:
    """Mail the hook's owner (its project's leads) that it was disabled; after the commit,
    outside any transaction. A mail that fails is logged: the page shows it too."""
    addresses = [user.email for user in _owners(hook) if user.email]
    if not addresses:
        logger.warning("webhook %s disabled; nobody with an address to tell", hook.pk)
        return
    try:
        send_mail(
            subject="[Slurm GPU Portal] A webhook was disabled",
            message=(
                f"The webhook to {hook.url} ({hook.user or hook.project}) was disabled:\n\n"
                f"{hook.disabled_reason}\n\n"
                "Fix the receiver, then send a test delivery from the portal's webhooks page "
                "(or `sgp hooks test`): one that succeeds turns the webhook back on.\n"
            ),
            from_email=settings.PORTAL_EMAIL_FROM,
            recipient_list=addresses,
        )
    except (smtplib.SMTPException, OSError) as error:
        logger.warning(
            "could not tell %s that webhook %s was disabled: %s", addresses, hook.pk, error
        )
        mail_counted("webhook_disabled", sent=False)
    else:
        mail_counted("webhook_disabled", sent=True)


def webhook_deliveries_due(*, now: dt.datetime | None = None, limit: int = 500) -> list[int]:
    """The deliveries whose try is due (new ones a lost task never sent, and retries)."""
    now = now or timezone.now()
    return list(
        WebhookDelivery.objects.filter(state=WebhookDelivery.State.PENDING, next_try_at__lte=now)
        .order_by("next_try_at")
        .values_list("pk", flat=True)[:limit]
    )


def webhooks_listed(user: User) -> QuerySet[Webhook]:
    """``webhooks_of(user)`` with what their latest delivery did (``last_*``)."""
    latest = WebhookDelivery.objects.filter(webhook=OuterRef("pk")).order_by("-created_at", "-id")
    return webhooks_of(user).annotate(
        last_event=Subquery(latest.values("event")[:1]),
        last_state=Subquery(latest.values("state")[:1]),
        last_status=Subquery(latest.values("last_status")[:1]),
        last_error=Subquery(latest.values("last_error")[:1]),
        last_attempt_at=Subquery(latest.values("last_attempt_at")[:1]),
    )
