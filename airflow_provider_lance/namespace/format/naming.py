"""Object ids, partition namespace names and leaf locations.

Names are derived, not random: a partition namespace's is 16 base36 characters of a BLAKE2b
digest of the parent id and the value, a leaf directory is ``<8 hex>_<object_id>``. So two
writers creating one partition pick the same id (insert-if-absent lets one win) and stage
in the one directory that will hold its table.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re

from airflow_provider_lance.namespace.errors import InvalidArgumentError

#: Transaction and stage ids: safe as object-store path segments.
TXN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=:+-]{0,199}$")
SEPARATOR = "$"
LEAF_TABLE_NAME = "dataset"
NAME_LENGTH = 16
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def spec_namespace_id(version: int) -> str:
    return f"v{version}"


_SPEC_OF_ID = re.compile(rf"^v(\d+){re.escape(SEPARATOR)}")


def spec_version_of(object_id: str) -> int:
    """The partition spec version a leaf table's ``object_id`` (``v<N>$...$dataset``)
    belongs to (:class:`~.errors.InvalidArgumentError` for any other id)."""
    match = _SPEC_OF_ID.match(object_id)
    if match is None:
        raise InvalidArgumentError(f"{object_id!r} is not the id of a partition")
    return int(match.group(1))


@functools.lru_cache(maxsize=1 << 16)
def partition_name(parent_id: str, field_id: int, value_text: str | None) -> str:
    """The 16-char base36 name of the child of ``parent_id`` holding one partition value."""
    key = json.dumps([parent_id, field_id, value_text], separators=(",", ":"))
    number = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=11).digest(), "big")
    chars = []
    for _ in range(NAME_LENGTH):
        number, digit = divmod(number, 36)
        chars.append(_BASE36[digit])
    return "".join(chars)


def join_id(*parts: str) -> str:
    return SEPARATOR.join(parts)


def leaf_directory(object_id: str) -> str:
    """The directory of a leaf table, relative to the namespace root: ``<8 hex>_<id>``."""
    return f"{hashlib.blake2b(object_id.encode(), digest_size=4).hexdigest()}_{object_id}"
