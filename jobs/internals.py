"""Where the portal leans on Django's and DRF's internals, for speed. Each use is here,
and tests/jobs/test_internals.py fails if an upgrade changes what it relies on."""

import functools
from typing import Any, TypeVar

from django.db.models import Model
from rest_framework import serializers

S = TypeVar("S", bound=serializers.BaseSerializer)


def remember_related(instance: Model, **rows: list[Any]) -> None:
    """Keep the rows an object was just made with as its related sets, the way
    prefetch_related keeps them (a queryset holding its results, Django's
    ``_prefetched_objects_cache``), so showing the new object reads nothing more; a
    filter on them still asks the database."""
    cache = instance.__dict__.setdefault("_prefetched_objects_cache", {})
    for name, related in rows.items():
        known = getattr(instance, name).all()
        known._result_cache = related
        known._prefetch_done = True
        cache[name] = known


@functools.cache
def shared_serializer(serializer_class: type[S]) -> S:
    """One serializer of ``serializer_class`` per process, for showing objects through
    ``to_representation``: DRF builds a serializer's fields anew for each instance
    (1.1 ms a job, most of what showing one costs); showing is read-only, so built
    fields can be shared."""
    return serializer_class()
