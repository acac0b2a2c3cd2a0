"""The Content-Security-Policy and Cross-Origin-Resource-Policy of every response, and
the bearer token a monitoring system sends.

Django's own middleware sends the other security headers from settings
(``SecurityMiddleware``: nosniff, Referrer-Policy, Cross-Origin-Opener-Policy,
HSTS; ``XFrameOptionsMiddleware``: X-Frame-Options), so ``check --deploy``
sees them; Django 5.2 has no CSP of its own, hence this.

The portal's pages have no inline script, no inline style and no ``on*=``
handler (tests/security/test_headers.py scans the templates), so the policy
allows scripts and styles from the portal's own origin only: an injected
``<script>`` or ``style=`` does nothing.
"""

import hmac
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

CSP_HEADER = "Content-Security-Policy"

PORTAL_POLICY: dict[str, str] = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self'",
    "font-src": "'self'",
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'none'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}

# Swagger UI (drf-spectacular-sidecar, at /api/docs/) is served by the split view,
# whose start-up script is a file of its own, so scripts stay 'self' there too.
# Its page has a <style> block and its stylesheet draws icons from data: URLs;
# the page renders no portal data on the server (it fetches the schema), so
# inline styles are allowed on that one page rather than patching the vendor's files.
API_DOCS_POLICY: dict[str, str] = {
    **PORTAL_POLICY,
    "style-src": "'self' 'unsafe-inline'",
    "img-src": "'self' data:",
}
API_DOCS_VIEW = "api:docs"


def policy_header(directives: dict[str, str]) -> str:
    return "; ".join(f"{name} {value}" for name, value in directives.items())


PORTAL_CSP = policy_header(PORTAL_POLICY)
API_DOCS_CSP = policy_header(API_DOCS_POLICY)


class SecurityHeadersMiddleware:
    """Adds the CSP (a view that set its own keeps it) and CORP to every response."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        is_docs = match is not None and match.view_name == API_DOCS_VIEW
        response.headers.setdefault(CSP_HEADER, API_DOCS_CSP if is_docs else PORTAL_CSP)
        # No other site may load the portal's pages, API answers or scripts as
        # subresources (e.g. the docs' start-up script, which carries a CSRF token).
        response.headers.setdefault("Cross-Origin-Resource-Policy", "same-origin")
        return response


def bearer_token_matches(request: HttpRequest, token: str) -> bool:
    """Whether the request sends ``Authorization: Bearer <token>``: a monitoring
    system's token (/healthz's detail, /metrics), compared in constant time."""
    scheme, _, sent = request.headers.get("Authorization", "").strip().partition(" ")
    if not token or scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(sent.strip().encode(), token.encode())
