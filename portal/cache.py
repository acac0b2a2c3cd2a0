"""The cache's serializer: JSON, never pickle.

Django's Redis cache pickles values by default, so anyone who can write one key
in Redis could make the portal run code of theirs when it reads the value back.
Values here are plain data (strings, numbers, lists, dicts); anything else fails
loudly where it is stored.
"""

import json
from typing import Any


class JSONSerializer:
    def dumps(self, obj: Any) -> bytes | int:
        # Integers are stored as they are, so that Redis's INCR works on them (as
        # Django's own serializer does).
        if type(obj) is int:
            return obj
        return json.dumps(obj, separators=(",", ":")).encode()

    def loads(self, data: bytes) -> Any:
        try:
            return int(data)
        except ValueError:
            return json.loads(data)
