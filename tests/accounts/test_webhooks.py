"""Webhooks: signed deliveries to a real receiver on loopback, retries with backoff, a
hook disabled after failures, and addresses refused before any connection is made.

Nothing here may send a packet to a non-loopback address (this machine's network rules
flag it): every test runs with ``socket.socket.connect`` guarded, and names resolve
through an injected resolver, never DNS."""

import datetime as dt
import hashlib
import hmac
import http.server
import ipaddress
import json
import socket
import ssl
import subprocess
import threading
import time

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from accounts import webhook_http
from accounts.errors import NotAllowed, Refused
from accounts.models import Webhook, WebhookDelivery
from accounts.services import membership_set
from accounts.webhooks import (
    backoff,
    webhook_create,
    webhook_deliver,
    webhook_deliveries_due,
    webhook_event,
    webhook_test_send,
)
from jobs.accounting import accounting_ingest
from tests.jobs import test_accounting_ingest as ingest
from tests.jobs.test_accounting_ingest import entry, portal_job

cluster = ingest.cluster
project = ingest.project

LOOPBACK_ONLY = ["127.0.0.1/32"]


@pytest.fixture(autouse=True)
def connections(monkeypatch):
    """Every connect the code under test makes; one to anything but 127.0.0.1 fails the
    test before a packet leaves."""
    made: list[tuple] = []
    real_connect = socket.socket.connect

    def guarded(sock, address):
        made.append(address)
        if address[0] != "127.0.0.1":
            raise AssertionError(f"a connection to {address} was attempted")
        return real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    return made


@pytest.fixture(autouse=True)
def _site(settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = LOOPBACK_ONLY
    settings.WEBHOOK_RETRY_BASE_S = 30
    settings.WEBHOOK_MAX_ATTEMPTS = 8
    settings.WEBHOOK_DISABLE_AFTER = 3
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"


class Receiver:
    """A real HTTP server on 127.0.0.1 that records what it is sent and answers with the
    statuses it is given (then 200), or a redirect."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.statuses: list[int] = []
        self.redirect_to: str | None = None
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append({"headers": dict(self.headers), "body": body})
                if receiver.redirect_to:
                    self.send_response(307)
                    self.send_header("Location", receiver.redirect_to)
                else:
                    self.send_response(receiver.statuses.pop(0) if receiver.statuses else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()


@pytest.fixture
def receiver():
    receiver = Receiver()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()


def verify(secret: str, headers: dict, body: bytes, *, now: float, tolerance_s: int = 300) -> bool:
    """The receiver's side, as the README tells it."""
    timestamp = int(headers["X-SGP-Timestamp"])
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    given = headers["X-SGP-Signature"].removeprefix("v1=")
    return abs(now - timestamp) <= tolerance_s and hmac.compare_digest(expected.hexdigest(), given)


def resolving(table: dict[str, list[str]]):
    def resolver(host: str, port: int) -> list[str]:
        return table[host]

    return resolver


def test_a_receiver_gets_a_signed_job_end_delivery(
    cluster, project, alice, receiver, django_capture_on_commit_callbacks, connections
):
    hook, secret = webhook_create(actor=alice, url=receiver.url, events=["job.ended"])
    job = portal_job(project, cluster, alice, slurm_job_id=700)
    with django_capture_on_commit_callbacks() as callbacks:
        accounting_ingest(cluster=cluster, entries=[entry(700, state="FAILED", exit_code=3)])
    delivery = WebhookDelivery.objects.get()
    assert (delivery.webhook, delivery.event) == (hook, "job.ended")
    assert len(callbacks) == 1  # the worker is asked after the commit

    assert webhook_deliver(delivery_id=delivery.pk) == "delivered"

    [request] = receiver.requests
    assert verify(secret, request["headers"], request["body"], now=time.time())
    assert not verify("whsec_other", request["headers"], request["body"], now=time.time())
    assert not verify(secret, request["headers"], request["body"], now=time.time() + 3600)
    document = json.loads(request["body"])
    assert document["event"] == "job.ended"
    assert document["data"]["job"] == job.pk
    assert (document["data"]["state"], document["data"]["exit_code"]) == ("failed", 3)
    assert request["headers"]["Host"] == receiver.url.split("/")[2]
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, delivery.last_status) == ("delivered", 1, 200)
    # A repeat (a redelivered task, the ingest reading the records again) sends nothing.
    assert webhook_deliver(delivery_id=delivery.pk) is None
    accounting_ingest(cluster=cluster, entries=[entry(700, state="FAILED", exit_code=3)])
    assert WebhookDelivery.objects.count() == 1
    assert len(receiver.requests) == 1
    assert {address[0] for address in connections} == {"127.0.0.1"}


def test_a_project_hook_hears_of_its_jobs_and_a_teammate_hook_does_not(
    cluster, project, alice, bob, charlie, receiver
):
    membership_set(project=project, user=bob, role="member")
    project_hook, _ = webhook_create(
        actor=alice, project=project, url=receiver.url, events=["job.ended"], format="slack"
    )
    webhook_create(actor=bob, url=receiver.url, events=["job.ended"])  # bob's own jobs only
    portal_job(project, cluster, alice, slurm_job_id=701)
    accounting_ingest(cluster=cluster, entries=[entry(701)])
    [delivery] = WebhookDelivery.objects.all()
    assert delivery.webhook == project_hook
    webhook_deliver(delivery_id=delivery.pk)
    body = json.loads(receiver.requests[0]["body"])
    assert list(body) == ["text"] and "ended completed" in body["text"]


def test_only_a_lead_registers_a_project_hook_and_a_user_hook_hears_only_job_ends(
    project, alice, charlie, receiver
):
    membership_set(project=project, user=charlie, role="member")
    with pytest.raises(NotAllowed):
        webhook_create(actor=charlie, project=project, url=receiver.url, events=["job.ended"])
    with pytest.raises(Refused):
        webhook_create(actor=charlie, url=receiver.url, events=["allocation.usage_80"])
    webhook_create(actor=alice, project=project, url=receiver.url, events=["member.cap_reached"])
    assert webhook_event("member.cap_reached", project=project, user=charlie, payload={}) == 1
    assert webhook_event("job.ended", project=project, user=charlie, payload={}) == 0


def test_a_failing_receiver_is_retried_with_backoff_then_the_hook_is_disabled(
    alice, receiver, settings
):
    alice.email = "alice@example.org"
    alice.save(update_fields=["email"])
    receiver.statuses = [500, 500, 500]
    hook, _ = webhook_create(actor=alice, url=receiver.url, events=["job.ended"])
    webhook_event("job.ended", user=alice, payload={"job": 1})
    delivery = WebhookDelivery.objects.get()
    now = timezone.now()

    assert webhook_deliver(delivery_id=delivery.pk, now=now) == "pending"
    delivery.refresh_from_db()
    first_wait = delivery.next_try_at - now
    assert dt.timedelta(seconds=15) <= first_wait <= dt.timedelta(seconds=30)
    assert (delivery.attempts, delivery.last_status, delivery.last_error) == (1, 500, "HTTP 500")
    # Not due yet: a sweep does not pick it, an early task does nothing.
    assert webhook_deliveries_due(now=now) == []
    assert webhook_deliver(delivery_id=delivery.pk, now=now) is None

    now = delivery.next_try_at
    assert webhook_deliveries_due(now=now) == [delivery.pk]
    assert webhook_deliver(delivery_id=delivery.pk, now=now) == "pending"
    delivery.refresh_from_db()
    assert dt.timedelta(seconds=30) <= delivery.next_try_at - now <= dt.timedelta(seconds=60)

    assert webhook_deliver(delivery_id=delivery.pk, now=delivery.next_try_at) == "pending"
    assert len(receiver.requests) == 3
    hook.refresh_from_db()
    assert hook.disabled_at is not None
    assert "3 failed deliveries in a row" in hook.disabled_reason
    [note] = mail.outbox
    assert note.to == ["alice@example.org"] and receiver.url in note.body
    # Disabled: new events record nothing, the pending delivery is not tried again.
    assert webhook_event("job.ended", user=alice, payload={"job": 2}) == 0
    delivery.refresh_from_db()
    assert webhook_deliver(delivery_id=delivery.pk, now=delivery.next_try_at) == "failed"
    assert len(receiver.requests) == 3

    # A test delivery that succeeds turns it back on.
    ping = webhook_test_send(webhook=hook)
    assert webhook_deliver(delivery_id=ping.pk) == "delivered"
    hook.refresh_from_db()
    assert (hook.disabled_at, hook.consecutive_failures) == (None, 0)


def test_backoff_doubles_with_jitter_and_is_capped(settings):
    settings.WEBHOOK_RETRY_BASE_S = 30
    for attempts, full in [(1, 30), (2, 60), (3, 120), (20, 3600)]:
        for _ in range(20):
            assert full / 2 <= backoff(attempts).total_seconds() <= full


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.2",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",  # noqa: S104 (an address refused, not one bound)
        "224.0.0.1",
        "240.0.0.1",
        "198.18.0.1",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "ff02::1",
        "::ffff:169.254.169.254",
        "::ffff:10.0.0.1",
        "::a9fe:a9fe",
        "2002:a9fe:a9fe::1",
        "64:ff9b::a9fe:a9fe",
        "2001:0:4136:e378:8000:63bf:f5fe:5601",
    ],
)
def test_non_public_addresses_are_refused(address):
    assert webhook_http.address_refusal(ipaddress.ip_address(address), []) is not None


def test_public_addresses_and_allowed_networks_pass():
    assert webhook_http.address_refusal(ipaddress.ip_address("93.184.216.34")) is None
    assert webhook_http.address_refusal(ipaddress.ip_address("2606:2800:220:1::1")) is None
    allowed = [ipaddress.ip_network("127.0.0.1/32")]
    assert webhook_http.address_refusal(ipaddress.ip_address("127.0.0.1"), allowed) is None
    assert webhook_http.address_refusal(ipaddress.ip_address("127.0.0.2"), allowed) is not None


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://10.0.0.5:8080/hook", "private"),
        ("http://[::ffff:192.168.0.1]/", "private"),
        ("ftp://127.0.0.1/", "only http and https"),
        ("http://127.0.0.1:22/", "port 22"),
        ("http://user:pw@127.0.0.1:8000/", "no user name"),
    ],
)
def test_registration_refuses_addresses_the_site_does_not_allow(alice, url, why, connections):
    with pytest.raises(Refused, match=why):
        webhook_create(actor=alice, url=url, events=["job.ended"])
    assert connections == []


@pytest.mark.parametrize(
    ("names", "why"),
    [
        ({"evil.test": ["169.254.169.254"]}, "169.254.169.254 is a link-local address"),
        ({"evil.test": ["93.184.216.34", "10.0.0.1"]}, "10.0.0.1 is a private address"),
        ({"evil.test": ["2606:2800:220:1::1", "fd00::1"]}, "fd00::1 is a private address"),
        ({"evil.test": ["::ffff:127.0.0.1"]}, "::ffff:7f00:1 is a private address"),
        ({"evil.test": []}, "does not resolve"),
    ],
)
def test_a_name_is_refused_when_any_address_it_resolves_to_is(alice, names, why, connections):
    webhook_create(actor=alice, url="http://evil.test/hook", events=["job.ended"])
    webhook_event("job.ended", user=alice, payload={})
    delivery = WebhookDelivery.objects.get()
    webhook_deliver(delivery_id=delivery.pk, resolver=resolving(names))
    delivery.refresh_from_db()
    assert why in delivery.last_error and delivery.state == "pending"
    assert connections == []


def test_a_name_resolving_to_metadata_is_refused_where_the_delivery_connects(
    alice, receiver, connections
):
    # The name reached the receiver once; it now points at the metadata service (DNS
    # rebinding): the next delivery resolves again and refuses, sending nothing.
    port = receiver.url.split(":")[2].split("/")[0]
    webhook_create(actor=alice, url=f"http://evil.test:{port}/hook", events=["job.ended"])
    webhook_event("job.ended", user=alice, payload={"n": 1})
    webhook_event("job.ended", user=alice, payload={"n": 2})
    first, second = WebhookDelivery.objects.order_by("pk")
    assert webhook_deliver(delivery_id=first.pk, resolver=resolving({"evil.test": ["127.0.0.1"]}))
    assert (
        len(receiver.requests) == 1
        and receiver.requests[0]["headers"]["Host"] == f"evil.test:{port}"
    )
    names = resolving({"evil.test": ["169.254.169.254"]})
    assert webhook_deliver(delivery_id=second.pk, resolver=names) == "pending"
    second.refresh_from_db()
    assert "169.254.169.254 is a link-local address" in second.last_error
    assert second.last_status is None and len(receiver.requests) == 1
    assert {address[0] for address in connections} == {"127.0.0.1"}


def test_a_redirect_to_a_private_address_is_refused_and_nothing_is_sent_there(
    alice, receiver, connections
):
    receiver.redirect_to = "http://10.0.0.7/steal"
    webhook_create(actor=alice, url=receiver.url, events=["job.ended"])
    webhook_event("job.ended", user=alice, payload={})
    delivery = WebhookDelivery.objects.get()
    webhook_deliver(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert "10.0.0.7 is a private address" in delivery.last_error
    assert len(receiver.requests) == 1
    assert {address[0] for address in connections} == {"127.0.0.1"}


def test_a_redirect_within_the_allowed_network_is_followed(alice, receiver):
    second = Receiver()
    try:
        receiver.redirect_to = second.url
        webhook_create(actor=alice, url=receiver.url, events=["job.ended"])
        webhook_event("job.ended", user=alice, payload={})
        assert webhook_deliver(delivery_id=WebhookDelivery.objects.get().pk) == "delivered"
        assert len(second.requests) == 1
    finally:
        second.server.shutdown()
        second.server.server_close()


def test_a_user_hook_hears_only_of_its_owners_jobs(alice, bob, receiver):
    hook, _ = webhook_create(actor=alice, url=receiver.url, events=["job.ended"])
    assert webhook_event("job.ended", user=bob, payload={}) == 0
    assert list(Webhook.objects.filter(user=alice)) == [hook]


def test_the_api_registers_lists_tests_and_deletes_a_hook(project, alice, bob, receiver):
    from accounts.tokens import token_create

    membership_set(project=project, user=bob, role="member")
    _, plain = token_create(user=alice, name="t")
    api = Client(headers={"Authorization": f"Bearer {plain}"})
    answer = api.post(
        "/api/v1/hooks/",
        {"url": receiver.url, "events": ["job.ended", "allocation.usage_80"], "project": "vision"},
        content_type="application/json",
    )
    assert answer.status_code == 201, answer.content
    secret, hook_id = answer.json()["secret"], answer.json()["id"]
    assert secret.startswith("whsec_") and Webhook.objects.get(pk=hook_id).secret == secret
    listed = api.get("/api/v1/hooks/").json()
    assert [h["id"] for h in listed] == [hook_id] and "secret" not in listed[0]

    refused = api.post(
        "/api/v1/hooks/",
        {"url": "http://169.254.169.254/", "events": ["job.ended"]},
        content_type="application/json",
    )
    assert refused.status_code == 400 and "link-local" in refused.json()["error"]["message"]

    _, bobs = token_create(user=bob, name="t")
    teammate = Client(headers={"Authorization": f"Bearer {bobs}"})
    assert teammate.post(f"/api/v1/hooks/{hook_id}/test/").status_code == 404
    assert teammate.delete(f"/api/v1/hooks/{hook_id}/").status_code == 404
    assert api.post(f"/api/v1/hooks/{hook_id}/test/").status_code == 202
    assert webhook_deliver(delivery_id=WebhookDelivery.objects.get().pk) == "delivered"
    assert api.get("/api/v1/hooks/").json()[0]["last_status"] == 200
    assert api.delete(f"/api/v1/hooks/{hook_id}/").status_code == 204
    assert not Webhook.objects.exists()


def test_the_page_shows_a_new_secret_once_and_a_disabled_hook_with_its_reason(alice, receiver):
    page = Client()
    page.force_login(alice)
    answer = page.post(
        "/hooks/", {"owner": "", "url": receiver.url, "events": ["job.ended"], "format": "json"}
    )
    assert answer.status_code == 200
    hook = Webhook.objects.get()
    assert hook.secret in answer.content.decode()
    Webhook.objects.filter(pk=hook.pk).update(
        disabled_at=timezone.now(), disabled_reason="Disabled after 3 failed deliveries"
    )
    again = page.get("/hooks/").content.decode()
    assert hook.secret not in again and "Disabled after 3 failed deliveries" in again
    bad = page.post(
        "/hooks/", {"url": "http://10.0.0.1/", "events": ["job.ended"], "format": "json"}
    )
    assert bad.status_code == 400 and "private address" in bad.content.decode()


def test_an_allocation_notice_reaches_the_project_hooks_once(project, cluster, alice, receiver):
    from accounts.ledger import ledger_charge
    from accounts.notifications import notifications_send

    hook, _ = webhook_create(
        actor=alice, project=project, url=receiver.url, events=["allocation.usage_80"]
    )
    allocation = project.allocations.get()
    ledger_charge(allocation=allocation, reference="r:1", gpu_seconds=9 * 3600, user=alice)
    notifications_send()
    notifications_send()
    [delivery] = hook.deliveries.all()
    assert delivery.event == "allocation.usage_80" and delivery.payload["project"] == "vision"


def test_a_member_reaching_their_cap_is_announced_once_per_cap_to_the_project_hooks(
    project, alice, bob, receiver
):
    from accounts.caps import caps_reached_announce, member_cap_set
    from accounts.ledger import ledger_charge

    membership_set(project=project, user=bob, role="member")
    hook, _ = webhook_create(
        actor=alice, project=project, url=receiver.url, events=["member.cap_reached"]
    )
    allocation = project.allocations.get()
    member_cap_set(actor=alice, allocation=allocation, user=bob, gpu_hours=2)
    member_cap_set(actor=alice, allocation=allocation, user=None, gpu_hours=0)  # alice: 0
    ledger_charge(allocation=allocation, reference="r:1", gpu_seconds=3600, user=bob)
    assert caps_reached_announce() == 0  # half of bob's cap; alice's cap of 0 is no news

    ledger_charge(allocation=allocation, reference="r:2", gpu_seconds=3600, user=bob)
    assert caps_reached_announce() == 1
    assert caps_reached_announce() == 0  # once
    member_cap_set(actor=alice, allocation=allocation, user=bob, gpu_hours=3)
    ledger_charge(allocation=allocation, reference="r:3", gpu_seconds=3600, user=bob)
    assert caps_reached_announce() == 1  # a raised cap reached again is news again

    deliveries = list(hook.deliveries.order_by("pk"))
    assert [(d.event, d.payload["member"], d.payload["cap_gpu_hours"]) for d in deliveries] == [
        ("member.cap_reached", "bob", 2.0),
        ("member.cap_reached", "bob", 3.0),
    ]
    assert deliveries[1].payload["used_gpu_hours"] == 3.0
    assert "bob has used 3.0 of their 3.0-GPU-hour cap" in deliveries[1].text


def test_a_try_whose_worker_died_counts_and_the_last_one_gives_up(alice, receiver, settings):
    settings.WEBHOOK_MAX_ATTEMPTS = 2
    webhook_create(actor=alice, url=receiver.url, events=["job.ended"])
    webhook_event("job.ended", user=alice, payload={})
    delivery = WebhookDelivery.objects.get()
    # Two claims whose workers were killed before recording anything (the lease ran out).
    WebhookDelivery.objects.filter(pk=delivery.pk).update(attempts=2)
    assert webhook_deliver(delivery_id=delivery.pk) == "failed"
    delivery.refresh_from_db()
    assert (delivery.attempts, delivery.last_error) == (3, "the last try did not finish")
    assert receiver.requests == []


NON_PUBLIC_V4 = [
    ipaddress.ip_network(n)
    for n in ("0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
              "172.16.0.0/12", "192.168.0.0/16", "224.0.0.0/4", "240.0.0.0/4")
]  # fmt: skip


@st.composite
def non_public_v4(draw) -> ipaddress.IPv4Address:
    network = draw(st.sampled_from(NON_PUBLIC_V4))
    offset = draw(st.integers(0, network.num_addresses - 1))
    return network.network_address + offset


@given(non_public_v4())
def test_every_ipv6_form_of_a_non_public_ipv4_address_is_refused(v4):
    as_int = int(v4)
    forms = [
        v4,
        ipaddress.IPv6Address(f"::ffff:{v4}"),  # IPv4-mapped
        ipaddress.IPv6Address(as_int),  # IPv4-compatible
        ipaddress.IPv6Address((0x2002 << 112) | (as_int << 80)),  # 6to4
        ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | as_int),  # NAT64
    ]
    for address in forms:
        assert webhook_http.address_refusal(address, []) is not None, address


@given(st.text(max_size=80))
def test_a_url_is_a_target_or_refused_never_an_error(url):
    try:
        target = webhook_http.target_of(url)
    except webhook_http.Refused:
        return
    assert target.scheme in ("http", "https") and target.host
    assert target.port in (80, 443) or 1024 <= target.port <= 65535


@given(st.from_regex(r"https?://[a-z0-9.\[\]:%@-]{1,30}(:[0-9]{1,6})?/[ -~]{0,20}", fullmatch=True))
def test_a_url_like_text_is_a_target_or_refused_never_an_error(url):
    test_a_url_is_a_target_or_refused_never_an_error.hypothesis.inner_test(url)


def test_https_sends_the_urls_name_as_sni_and_verifies_the_certificate(alice, tmp_path):
    """A TLS receiver on 127.0.0.1 with a self-signed certificate for evil.test: the
    delivery asks for evil.test (SNI) although it connects to the checked address, and
    refuses the certificate no authority signed."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=evil.test", "-addext", "subjectAltName=DNS:evil.test",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    names: list[str | None] = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.sni_callback = lambda sock, name, ctx: names.append(name)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def accept_one():
        conn, _ = server.accept()
        try:
            context.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError):
            pass  # the client gives up on the certificate
        finally:
            conn.close()

    thread = threading.Thread(target=accept_one, daemon=True)
    thread.start()
    try:
        webhook_create(actor=alice, url=f"https://evil.test:{port}/hook", events=["job.ended"])
        webhook_event("job.ended", user=alice, payload={})
        delivery = WebhookDelivery.objects.get()
        webhook_deliver(delivery_id=delivery.pk, resolver=resolving({"evil.test": ["127.0.0.1"]}))
        thread.join(timeout=10)
    finally:
        server.close()
    delivery.refresh_from_db()
    assert names == ["evil.test"]
    assert "CERTIFICATE_VERIFY_FAILED" in delivery.last_error
