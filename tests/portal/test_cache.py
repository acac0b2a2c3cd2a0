"""The cache holds JSON, never pickles: whoever writes a key in Redis cannot make the
portal run code when it reads the value back."""

import json
import pickle
from pathlib import Path

import pytest
from django.core.cache import cache


class Planted:
    """A pickle that touches a file when it is unpickled: what an attacker would plant."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def raw_redis():
    return cache._cache.get_client(write=True)  # Django's own client of the cache


def test_a_pickle_planted_in_redis_is_never_unpickled(tmp_path):
    marker = tmp_path / "ran"
    key = cache.make_key("portal:worker-heartbeat")
    raw_redis().set(key, pickle.dumps(Planted(marker)))
    try:
        with pytest.raises(ValueError):  # not JSON: refused, not run
            cache.get("portal:worker-heartbeat")
    finally:
        cache.delete("portal:worker-heartbeat")
    assert not marker.exists()


def test_values_are_stored_as_json_and_counters_as_integers():
    cache.set("test:json", {"at": "2026-12-03T10:00:00+00:00", "n": [1, 2.5, "x"]}, 30)
    raw = raw_redis().get(cache.make_key("test:json"))
    assert json.loads(raw) == {"at": "2026-12-03T10:00:00+00:00", "n": [1, 2.5, "x"]}
    assert cache.get("test:json") == {"at": "2026-12-03T10:00:00+00:00", "n": [1, 2.5, "x"]}
    cache.set("test:count", 0, 30)
    assert cache.incr("test:count") == 1
    cache.set("test:text", "123", 30)
    assert cache.get("test:text") == "123"  # a string stays a string
    cache.delete_many(["test:json", "test:count", "test:text"])


def test_a_value_json_cannot_hold_is_refused_where_it_is_stored():
    with pytest.raises(TypeError):
        cache.set("test:object", object(), 30)
