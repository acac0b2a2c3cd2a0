"""The console refuses with 400 the query strings its lists answered 500 to (found by
the crawl's hostile query strings), and still drills down to any real date."""

import pytest
from django.contrib import admin
from django.urls import reverse

from portal.console import ConsoleSite
from tests.security.conftest import person

pytestmark = pytest.mark.django_db


@pytest.fixture
def manager(client):
    client.force_login(person("console-manager", staff=True, manager=True))
    return client


def test_the_console_is_the_refusing_site():
    assert isinstance(admin.site, ConsoleSite)


@pytest.mark.parametrize(
    "query",
    [
        "state__exact=%00",  # PostgreSQL's text cannot hold a NUL
        "state__exact=1&state__exact=%00",
        "q=a&%00=1",
        "created_at__year=1000000000000000000000000000000",  # overflowed datetime()
        "created_at__year=9999",  # the year after it is no date
        "created_at__year=2026&created_at__month=99999999999999999999",
        "created_at__year=2026&created_at__month=1&created_at__day=%C2%B2",
    ],
)
def test_a_list_given_what_it_cannot_read_answers_400(manager, query):
    response = manager.get(f"{reverse('admin:jobs_job_changelist')}?{query}")
    assert response.status_code == 400


@pytest.mark.parametrize(
    "query",
    [
        "",
        "created_at__year=2026",
        "created_at__year=9998&created_at__month=12&created_at__day=31",
        "created_at__year=1&created_at__month=1&created_at__day=1",
        "state__exact=failed&q=x",
    ],
)
def test_a_list_drills_down_to_any_real_date(manager, query):
    response = manager.get(f"{reverse('admin:jobs_job_changelist')}?{query}")
    assert response.status_code == 200


def test_an_impossible_day_of_a_real_month_is_djangos_bad_lookup(manager):
    """Django refuses it itself, as any lookup it cannot make: back to the list, ?e=1."""
    url = reverse("admin:jobs_job_changelist")
    response = manager.get(f"{url}?created_at__year=2026&created_at__month=2&created_at__day=31")
    assert response.status_code == 302 and response["Location"].endswith("?e=1")


def test_who_is_not_signed_in_is_sent_to_the_log_in_first(client):
    response = client.get(f"{reverse('admin:jobs_job_changelist')}?state__exact=%00")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
