from typing import cast

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from accounts.models import User
from accounts.selectors import memberships_of_user
from portal.health import health_report


@require_GET
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    healthy, report = health_report()
    return JsonResponse(
        {"status": "ok" if healthy else "unavailable", **report},
        status=200 if healthy else 503,
    )


@login_required
def home(request: HttpRequest) -> HttpResponse:
    user = cast(User, request.user)  # login_required: never anonymous here
    return render(request, "portal/home.html", {"memberships": memberships_of_user(user)})
