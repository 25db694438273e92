"""Manifests stored as the change from a full one (format 2): round trips, the writer's choices, and
the decoder's refusals (laminar_kafka.coordinator.manifest_delta)."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laminar_kafka.coordinator.errors import CodecError
from laminar_kafka.coordinator.manifest_delta import (
    changed_from,
    collect_limit,
    decode_stored,
    encode_stored,
    manifest_digest,
    stored_format,
)
from laminar_kafka.coordinator.values import Manifest

KEYS = [f"orders:{p}" for p in range(40)]


def manifest(epoch: int, cursors: dict[str, int], source: str = "kafka") -> Manifest:
    return Manifest(epoch, 3, {source: cursors}, (f"n1-e{epoch}",), ((1, "boot-a"), (2, "boot-b")))


def bases(*known: Manifest):  # type: ignore[no-untyped-def]
    by_epoch = {m.epoch: m for m in known}

    def base_of(epoch: int) -> Manifest:
        if epoch not in by_epoch:
            raise CodecError(f"no base {epoch}")
        return by_epoch[epoch]
    return base_of


BASE = manifest(10, {key: 1_000 + i for i, key in enumerate(KEYS)})


def test_a_manifest_with_few_changes_is_stored_as_them_and_reads_back_whole() -> None:
    later = manifest(12, {**BASE.cursors["kafka"], KEYS[3]: 5_000, "orders:40": 7})
    stored = encode_stored(later, BASE, full_every=10)
    assert not stored.full and stored_format(stored.data) == 2
    body = json.loads(stored.data)
    assert body["base_epoch"] == 10 and body["base_digest"] == manifest_digest(BASE)
    assert body["cursors"] == {"kafka": {KEYS[3]: 5_000, "orders:40": 7}}
    assert len(stored.data) < len(later.to_json()) // 3
    assert decode_stored(stored.data, bases(BASE)) == (later, False)


def test_an_idle_epoch_stores_no_cursor() -> None:
    idle = manifest(11, dict(BASE.cursors["kafka"]))
    stored = encode_stored(idle, BASE, full_every=10)
    assert json.loads(stored.data)["cursors"] == {}
    assert decode_stored(stored.data, bases(BASE)) == (idle, False)


def test_full_when_no_base_too_old_a_base_a_base_not_older_most_cursors_moved_or_one_dropped() -> None:
    moved = manifest(12, {key: 9_000 for key in KEYS})
    assert encode_stored(moved, None, 10).full
    assert encode_stored(manifest(20, BASE.cursors["kafka"]), BASE, 10).full  # 20 - 10 >= full_every
    assert not encode_stored(manifest(19, BASE.cursors["kafka"]), BASE, 10).full
    assert encode_stored(manifest(10, BASE.cursors["kafka"]), BASE, 10).full  # a base must be older
    assert encode_stored(moved, BASE, 10).full  # every cursor moved: the delta would be no smaller
    dropped = manifest(12, {key: v for key, v in BASE.cursors["kafka"].items() if key != KEYS[0]})
    assert changed_from(dropped.cursors, BASE.cursors) is None and encode_stored(dropped, BASE, 10).full
    pinned = Manifest(0, 0, BASE.cursors)
    assert encode_stored(manifest(1, BASE.cursors["kafka"]), pinned, 10).full  # slot 0 is never a base
    full = encode_stored(moved, None, 10)
    assert decode_stored(full.data, bases()) == (moved, True)


@settings(max_examples=200, deadline=None)
@given(
    base=st.dictionaries(st.sampled_from(KEYS), st.integers(0, 10**6)),
    moves=st.dictionaries(st.sampled_from(KEYS), st.integers(0, 10**6)),
    gap=st.integers(1, 12),
)
def test_whatever_is_stored_reads_back_as_the_manifest(base: dict[str, int], moves: dict[str, int], gap: int) -> None:
    first = manifest(5, base)
    later = manifest(5 + gap, {**base, **{k: base.get(k, 0) + v for k, v in moves.items()}})
    stored = encode_stored(later, first, full_every=8)
    assert decode_stored(stored.data, bases(first)) == (later, stored.full)
    if not stored.full:
        assert gap < 8 and len(json.loads(stored.data)["cursors"].get("kafka", {})) * 2 <= len(later.cursors["kafka"])


def test_a_delta_refuses_another_base_a_base_out_of_range_and_a_malformed_body() -> None:
    later = manifest(12, {**BASE.cursors["kafka"], KEYS[0]: 1})
    stored = encode_stored(later, BASE, 10).data
    rewritten = manifest(10, {**BASE.cursors["kafka"], KEYS[5]: 1})  # slot 10 written again, other content
    with pytest.raises(CodecError, match="digest differs"):
        decode_stored(stored, bases(rewritten))
    with pytest.raises(CodecError, match="no base 10"):
        decode_stored(stored, bases())
    body = json.loads(stored)
    for field, value, message in (("base_epoch", 12, "not in 1..11"), ("base_epoch", 0, "not in 1..11"),
                                  ("base_digest", "", "base_digest"), ("cursors", {"kafka": {"orders:x": 1}}, "cursors")):
        with pytest.raises(CodecError, match=message):
            decode_stored(json.dumps({**body, field: value}).encode(), bases(BASE))
    with pytest.raises(CodecError, match=r"unknown \['extra'\]"):
        decode_stored(json.dumps({**body, "extra": 1}).encode(), bases(BASE))
    with pytest.raises(CodecError, match="missing"):
        decode_stored(json.dumps({k: v for k, v in body.items() if k != "base_epoch"}).encode(), bases(BASE))
    with pytest.raises(CodecError, match="unknown format_version 3"):
        decode_stored(json.dumps({**body, "format_version": 3}).encode(), bases(BASE))
    wrong_slot = Manifest(9, 3, BASE.cursors)
    with pytest.raises(CodecError, match="slot 10 holds manifest 9"):
        decode_stored(stored, lambda _epoch: wrong_slot)


def test_the_full_decoder_refuses_a_delta_by_its_version() -> None:
    stored = encode_stored(manifest(12, BASE.cursors["kafka"]), BASE, 10).data
    with pytest.raises(CodecError, match="format_version 2 is not the full format 1"):
        Manifest.from_json(stored)


def test_garbage_collection_keeps_the_base_of_every_kept_delta() -> None:
    keep, full_every, last = 3, 3, 40
    limit = collect_limit(last, keep, full_every)
    oldest_kept = last - keep + 1
    assert limit < oldest_kept - (full_every - 1)  # the oldest possible base of a kept delta survives
