"""``decode_cursors`` checks a whole cursors object in a few C calls when it is canonical (a
100,000-partition manifest is decoded by every node each epoch) and falls back to the checks key by
key otherwise: both paths accept and refuse exactly the same objects."""
from __future__ import annotations

from typing import Any

import pytest

from laminar_kafka.coordinator.codec import PARTITION_MAX, _all_canonical, decode_cursors, loads
from laminar_kafka.coordinator.errors import CodecError

REFUSED: list[dict[str, Any]] = [
    {"a:1\nb:2": 1},  # a line break inside a key must not pass for two keys
    {".:1": 1}, {"x:1": 1, "..:2": 3}, {"a:1": 1, ".:2": 3},
    {f"a:{PARTITION_MAX + 1}": 1}, {"a:9999999999": 1}, {"a:12345678901": 1},
    {"a:01": 1}, {"a:-1": 1}, {"a:": 1}, {":1": 1}, {"a": 1}, {"a b:1": 1}, {"é:1": 1}, {("x" * 250) + ":1": 1},
    {"a:1": True}, {"a:1": -1}, {"a:1": 2**63}, {"a:1": "1"}, {"a:1": None},
]
ACCEPTED: list[dict[str, Any]] = [
    {}, {"a:0": 0}, {f"a:{PARTITION_MAX}": 2**63 - 1, "b.c-d_E:7": 5}, {"...:1": 1, "a.:2": 2},
    {("x" * 249) + ":3": 4}, {f"t{n}:{n}": n for n in range(2000)},
]


@pytest.mark.parametrize("parts", REFUSED)
def test_a_non_canonical_object_is_refused_by_both_paths(parts: dict[str, Any]) -> None:
    assert not _all_canonical(parts)
    with pytest.raises(CodecError):
        decode_cursors({"kafka": parts}, "manifest: cursors")


@pytest.mark.parametrize("parts", ACCEPTED)
def test_a_canonical_object_takes_the_bulk_path_and_decodes_unchanged(parts: dict[str, Any]) -> None:
    assert _all_canonical(parts)
    assert decode_cursors({"kafka": parts}, "manifest: cursors") == {"kafka": parts}


def test_a_fraction_never_passes_for_an_offset() -> None:
    parts = loads(b'{"a:1": 1.0}', "manifest")
    assert not _all_canonical(parts)
    with pytest.raises(CodecError, match="must be an integer"):
        decode_cursors({"kafka": parts}, "manifest: cursors")


@pytest.mark.parametrize("raw", [b'{"a":1,"a":2}', b'{"c":{"a:1":1,"b:1":2,"a:1":3}}'])
def test_duplicate_keys_are_still_refused(raw: bytes) -> None:
    with pytest.raises(CodecError, match="duplicate key"):
        loads(raw, "manifest")
