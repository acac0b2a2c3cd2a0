"""The console's site: Django's admin, refusing with 400 the query strings its lists
would answer 500 to (issue 17's hostile query strings, found by the crawl).

Two such, in every model's list: a NUL in a filter's value (``?state__exact=%00``:
PostgreSQL's text cannot hold one and the query fails), and a date drill-down to a
year no date has (``?created_at__year=10**30`` overflows; ``9999`` fails building the
year after it). Django refuses other bad lookups itself (the list's ``?e=1``).
Refused here, on every page of the console, rather than in each app's admin: the
apps below the portal cannot share a module (DESIGN: audit imports only Django).
"""

import functools
from collections.abc import Callable
from typing import TypeVar, cast

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.core.exceptions import BadRequest
from django.http import HttpRequest
from django.http.response import HttpResponseBase

_View = TypeVar("_View", bound=Callable[..., HttpResponseBase])

# What a list's date drill-down (``date_hierarchy``) may be given: Django builds the
# day asked for and the one after the period, which must be a date too.
_DRILL_DOWN = {"__year": range(1, 9999), "__month": range(1, 13), "__day": range(1, 32)}


def query_refusal(request: HttpRequest) -> str | None:
    """Why the console refuses ``request``'s query string; None when it does not."""
    for name, values in request.GET.lists():
        for value in values:
            if "\x00" in name or "\x00" in value:
                return "A query string with a NUL character."
            part = next((p for p in _DRILL_DOWN if name.endswith(p)), None)
            if part is not None and not _in_calendar(value, _DRILL_DOWN[part]):
                return f"No date has {name}={value[:20]}."
    return None


def _in_calendar(value: str, allowed: range) -> bool:
    return value.isascii() and value.isdigit() and len(value) <= 4 and int(value) in allowed


class ConsoleSite(admin.AdminSite):
    def admin_view(self, view: _View, cacheable: bool = False) -> _View:
        # Inside Django's own wrapper: who is not signed in to the console is sent to
        # its log-in first, whatever the query string.
        @functools.wraps(view)
        def refusing(request: HttpRequest, *args, **kwargs) -> HttpResponseBase:
            refusal = query_refusal(request)
            if refusal is not None:
                raise BadRequest(refusal)
            return view(request, *args, **kwargs)

        return super().admin_view(cast(_View, refusing), cacheable)


class ConsoleAdminConfig(AdminConfig):
    default_site = "portal.console.ConsoleSite"
