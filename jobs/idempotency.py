"""Idempotency-Key for job creation: a repeat with the same key and body gets the first job.

With another body it is a conflict (the API's 409). Job.idempotency_key (unique per owner)
makes the repeat find the job; the body's fingerprint is kept in the cache for
a day, and after that (or without it) the job's own fields stand in for it.
"""

import hashlib
import json
import logging
import posixpath
from typing import Any

from django.core.cache import cache
from redis.exceptions import RedisError

from accounts.models import User
from jobs.models import Job
from jobs.requests import JobRequest
from jobs.services import job_create_or_find

logger = logging.getLogger(__name__)

IDEMPOTENCY_TTL_S = 24 * 3600


def _remembered(cache_key: str) -> str | None:
    try:
        return cache.get(cache_key)
    except RedisError:
        return None  # the job's own fields decide, as after the day has passed


def _remember(cache_key: str, fingerprint: str) -> bool:
    try:
        return cache.add(cache_key, fingerprint, timeout=IDEMPOTENCY_TTL_S)
    except RedisError as error:
        # Without the cache a job can still be made: the unique key on the job keeps
        # it to one, and a repeat compares the job's fields.
        logger.warning("idempotency fingerprints off: the cache does not answer (%s)", error)
        return False


def _forget(cache_key: str) -> None:
    try:
        cache.delete(cache_key)
    except RedisError:
        logger.warning("could not free the idempotency key %s", cache_key)


def _fingerprint(canonical: dict[str, Any]) -> str:
    body = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()


def _cache_key(user: User, key: str) -> str:
    return f"api:idempotency:{user.pk}:{hashlib.sha256(key.encode()).hexdigest()}"


def _normal_path(path: str, working_directory: str) -> str:
    # As jobs.paths normalises them: relative output paths hang off the working directory.
    if path and not path.startswith("/"):
        path = working_directory.rstrip("/") + "/" + path
    return "/" + posixpath.normpath(path).lstrip("/")


def _job_matches(job: Job, canonical: dict[str, Any]) -> bool:
    """Whether the fields the request gave are what the job stored."""
    stored = {
        "project": job.project.slug,
        "cluster": job.cluster.name,
        "partition": job.partition.name,
        "template": job.template_id,
        "depends_on": sorted(job.depends_on.values_list("id", flat=True)),
        **{
            name: getattr(job, name)
            for name in (
                "name",
                "nodes",
                "gpus_per_node",
                "cpus_per_gpu",
                "mem_per_gpu_gb",
                "time_limit_minutes",
                "environment",
                "array",
                "requeue",
                "script",
            )
        },
    }
    for name, value in canonical.items():
        if name == "working_directory":
            value, expected = _normal_path(value, "/"), job.working_directory
        elif name in ("output_path", "error_path"):
            value, expected = _normal_path(value, job.working_directory), getattr(job, name)
        else:
            expected = stored[name]
        if value != expected:
            return False
    return True


class IdempotencyConflict(Exception):
    """The key was used before with another request body."""


def job_create_once(
    *, user: User, key: str, canonical: dict[str, Any], request: JobRequest
) -> tuple[Job, bool]:
    """The job made earlier with ``key`` (and True: a repeat) or a new one (False);
    IdempotencyConflict when ``canonical`` (the request's fields, in a canonical form)
    is not what the key was first used with."""
    fingerprint = _fingerprint(canonical)
    cache_key = _cache_key(user, key)
    existing = Job.objects.filter(owner=user, idempotency_key=key).first()
    if existing is not None:
        _check_same(existing, cache_key, fingerprint, canonical, key)
        return existing, True
    # add() is atomic: of two first requests with one key, one claims it, and the
    # other compares its body with the claimant's before it may go on.
    claimed = _remember(cache_key, fingerprint)
    if not claimed and _remembered(cache_key) not in (None, fingerprint):
        raise IdempotencyConflict(key)
    try:
        job, replayed = job_create_or_find(user=user, request=request, idempotency_key=key)
    except BaseException:
        if claimed:  # nothing was saved: the key may be used again, with any body
            _forget(cache_key)
        raise
    if replayed:
        # Another request with the key saved its job first, while this one was on its
        # way (with the cache down, neither could compare bodies before).
        _check_same(job, cache_key, fingerprint, canonical, key)
    return job, replayed


def _check_same(
    existing: Job, cache_key: str, fingerprint: str, canonical: dict[str, Any], key: str
) -> None:
    """Raise IdempotencyConflict unless the request is the one ``existing`` was made from."""
    remembered = _remembered(cache_key)
    if remembered is not None:
        same = remembered == fingerprint
    else:
        same = _job_matches(existing, canonical)
    if not same:
        raise IdempotencyConflict(key)
