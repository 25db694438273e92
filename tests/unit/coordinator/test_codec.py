"""The strict durable codecs: every decoder round-trips valid values, and random bytes or mutated valid
encodings either decode to exactly what the bytes say or raise CodecError: never another exception,
never a coerced value."""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laminar_kafka.coordinator.codec import OFFSET_MAX, U64_MAX, format_partition_key, parse_partition_key
from laminar_kafka.coordinator.errors import CodecError, CoordinatorError
from laminar_kafka.coordinator.layout import (
    ChunkHeader,
    ChunkPending,
    epoch_wanted_data,
    join_chunks,
    parse_candidate,
    parse_epoch_wanted,
    parse_header,
    parse_rejection,
    parse_vnode_load,
    split_chunks,
)
from laminar_kafka.coordinator.state import ControlState, Decision, RoundState
from laminar_kafka.coordinator.values import EpochAck, Manifest, Member, RoundOutcome
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId

u64 = st.integers(0, U64_MAX)
node_ids = st.integers(1, 50)
boots = st.text("abcdef0123456789", min_size=1, max_size=8)
topics = st.text("abcXYZ09._-", min_size=1, max_size=12).filter(lambda t: t not in (".", ".."))
keys = st.builds(format_partition_key, topics, st.integers(0, 2**31 - 1))
cursors = st.dictionaries(st.text(min_size=1, max_size=6), st.dictionaries(keys, st.integers(0, OFFSET_MAX),
                                                                           max_size=4), max_size=3)
outputs = st.lists(st.text(max_size=10), max_size=3).map(tuple)
manifests = st.builds(Manifest, u64, u64, cursors, outputs,
                      st.lists(st.tuples(node_ids, boots), max_size=3).map(tuple))
acks = st.builds(EpochAck, node_ids, boots, u64, u64, cursors, outputs)
members = st.builds(Member, st.just(7), boots, st.text(max_size=10), st.booleans())
drain_ids = st.builds(lambda v, d: AssignmentDrainId(v, v + 1, d), st.integers(1, 2**32), st.integers(1, U64_MAX))


@st.composite
def controls(draw: st.DrawFn) -> ControlState:
    owners = tuple(draw(st.lists(st.integers(0, 5), min_size=1, max_size=8)))
    version = draw(st.integers(1, 2**32))
    changed = tuple(draw(st.integers(0, version)) for _ in owners)
    snapshot = AssignmentSnapshot(version, owners, changed)
    round_ = draw(st.none() | st.builds(RoundState, drain_ids, st.just(owners), u64, u64,
                                        st.lists(node_ids, max_size=3).map(tuple), u64))
    decisions = tuple(draw(st.lists(st.builds(Decision, drain_ids, st.sampled_from(RoundOutcome), u64), max_size=3)))
    boots_of = tuple(sorted(draw(st.dictionaries(node_ids, boots, max_size=4)).items()))
    return ControlState(snapshot, boots_of, draw(u64), round_, draw(u64), draw(u64), draw(u64), decisions, draw(u64))


def canonical(value: object) -> object:
    return json.loads(json.dumps(value))


DECODERS: dict[str, tuple[Callable[[bytes], Any], Callable[[Any], bytes]]] = {
    "manifest": (Manifest.from_json, lambda m: m.to_json()),
    "ack": (EpochAck.from_json, lambda a: a.to_json()),
    "member": (lambda raw: Member.from_json(7, raw), lambda m: m.to_json()),
    "register": (ControlState.from_json, lambda c: c.to_json()),
}
VALUES = {"manifest": manifests, "ack": acks, "member": members, "register": controls()}


def test_the_issue_example_is_rejected_not_coerced() -> None:
    """A manifest with epoch "3", version 2.9 and offsets -7 and true used to decode to 3, 2, -7, 1."""
    raw = (b'{"epoch":"3","assignment_version":2.9,"cursors":{"s":{"t:0":-7,"t:1":true}},"outputs":[],"acked_by":[],'
           b'"format_version":1}')
    with pytest.raises(CodecError, match="epoch"):
        Manifest.from_json(raw)

    def manifest(epoch: str = "3", version: str = "2", first: str = "7", second: str = "1") -> bytes:
        return (f'{{"epoch":{epoch},"assignment_version":{version},"cursors":{{"s":{{"t:0":{first},'
                f'"t:1":{second}}}}},"outputs":[],"acked_by":[],"format_version":1}}').encode()

    assert Manifest.from_json(manifest()) == Manifest(3, 2, {"s": {"t:0": 7, "t:1": 1}})
    for bad, named in ((manifest(epoch='"3"'), "manifest: epoch"), (manifest(version="2.9"), "fraction"),
                       (manifest(first="-7"), "'t:0'"), (manifest(second="true"), "'t:1'")):
        with pytest.raises(CodecError, match=named):
            Manifest.from_json(bad)


def test_format_versions() -> None:
    manifest = Manifest(3, 2, {"s": {"t:0": 7}})
    assert json.loads(manifest.to_json())["format_version"] == 1
    unversioned = json.loads(manifest.to_json())
    del unversioned["format_version"]
    with pytest.raises(CodecError, match=r"missing \['format_version'\]"):
        Manifest.from_json(json.dumps(unversioned).encode())
    with pytest.raises(CodecError, match="format_version 2"):
        Manifest.from_json(json.dumps({**unversioned, "format_version": 2}).encode())


@pytest.mark.parametrize("name", sorted(DECODERS))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_valid_values_round_trip(name: str, data: st.DataObject) -> None:
    decode, encode = DECODERS[name]
    value = data.draw(VALUES[name])
    assert decode(encode(value)) == value


def mutate(value: object, draw: Callable[[st.SearchStrategy[Any]], Any]) -> object:
    """One random change somewhere in a JSON value: a type swap, a sign, a bool, a float, a missing or
    extra key, or nothing at all."""
    if isinstance(value, dict) and value and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(value)))
        kind = draw(st.sampled_from(["descend", "drop", "extra"]))
        if kind == "drop":
            return {k: v for k, v in value.items() if k != key}
        if kind == "extra":
            return {**value, draw(st.text(max_size=4)): 1}
        return {**value, key: mutate(value[key], draw)}
    if isinstance(value, list) and value and draw(st.booleans()):
        index = draw(st.integers(0, len(value) - 1))
        return value[:index] + [mutate(value[index], draw)] + value[index + 1:]
    return draw(st.sampled_from([
        value, str(value), -1, -7, True, False, None, 2.9, 2**64, [], {}, "x", 0,
        value + 1 if isinstance(value, int) and not isinstance(value, bool) else value,
    ]))


@pytest.mark.parametrize("name", sorted(DECODERS))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_mutated_encodings_decode_faithfully_or_raise_codec_error(name: str, data: st.DataObject) -> None:
    decode, encode = DECODERS[name]
    original = json.loads(encode(data.draw(VALUES[name])))
    mutated = mutate(original, data.draw)
    try:
        decoded = decode(json.dumps(mutated).encode())
    except CodecError:
        return
    again = json.loads(encode(decoded))
    assert again == canonical(mutated)  # what the bytes said, nothing coerced


@pytest.mark.parametrize("name", sorted(DECODERS))
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_truncated_encodings_and_random_bytes_raise_codec_error(name: str, data: st.DataObject) -> None:
    decode, encode = DECODERS[name]
    raw = encode(data.draw(VALUES[name]))
    cut = raw[:data.draw(st.integers(0, len(raw) - 1))]
    with pytest.raises(CodecError):
        decode(cut)
    noise = data.draw(st.binary(max_size=64))
    try:
        decode(noise)
    except CodecError:
        pass


@settings(max_examples=100, deadline=None)
@given(blob=st.binary(max_size=64), text=st.text(max_size=40))
def test_small_records_raise_only_codec_errors(blob: bytes, text: str) -> None:
    for decode in (parse_candidate, parse_rejection, parse_vnode_load, parse_header, parse_epoch_wanted,
                   lambda raw: Decision.from_json(raw)):
        for raw in (blob, text.encode(), b'{"chunked"' + blob):
            try:
                decode(raw)
            except CodecError:
                pass
    try:
        parse_partition_key(text)
    except CodecError:
        pass


@settings(max_examples=50, deadline=None)
@given(data=st.binary(min_size=1, max_size=300), size=st.integers(1, 64), drop=st.data())
def test_chunks_join_only_when_complete_and_matching(data: bytes, size: int, drop: st.DataObject) -> None:
    header, chunks = split_chunks(data, size)
    assert parse_header(header.to_json()) == header
    assert join_chunks("p", header, list(chunks)) == data
    missing = drop.draw(st.integers(0, len(chunks) - 1))
    with pytest.raises(ChunkPending, match="missing"):
        join_chunks("p", header, [None if i == missing else c for i, c in enumerate(chunks)])
    with pytest.raises(ChunkPending):
        join_chunks("p", header, list(chunks[:-1]))  # truncated
    with pytest.raises(ChunkPending):
        join_chunks("p", ChunkHeader(header.chunks, header.size, header.xxh3 ^ 1), list(chunks))


def test_malformed_chunk_headers_name_the_field() -> None:
    with pytest.raises(CodecError, match="chunks"):
        parse_header(b'{"chunked": true, "chunks": "3", "size": 1, "xxh3": 1}')
    with pytest.raises(CodecError, match="size"):
        parse_header(b'{"chunked": true, "chunks": 3, "size": -1, "xxh3": 1}')
    with pytest.raises(CodecError, match="keys"):
        parse_header(b'{"chunked": true, "chunks": 3, "size": 1}')
    assert parse_header(b'{"epoch": 1}') is None  # a plain value


def test_codec_errors_are_coordinator_errors() -> None:
    assert issubclass(CodecError, CoordinatorError) and issubclass(ChunkPending, CodecError)


def test_the_zookeeper_layout_is_pinned() -> None:
    """Existing pipelines hold these paths: they never change (see laminar_kafka.coordinator.layout)."""
    from laminar_kafka.coordinator.config import CoordinatorConfig
    from laminar_kafka.coordinator.layout import (
        ack_path,
        checkpoint_path,
        decision_path,
        member_path,
        pipeline_path,
        ready_path,
        rejected_folder,
        topic_path,
    )

    assert pipeline_path(CoordinatorConfig(pipeline="p")) == "/laminar/p"
    assert pipeline_path(CoordinatorConfig(pipeline="p", root="/a/b")) == "/a/b/p"
    assert member_path(3) == "members/3"
    assert checkpoint_path(5) == "checkpoints/00000000000000000005"
    assert ack_path(5, 3, "b0") == "epochs/00000000000000000005/acks/3.b0"
    assert rejected_folder(5) == "epochs/00000000000000000005/rejected"
    assert ready_path(2, 3, "b0") == "rounds/00000000000000000002/ready/3.b0"
    assert decision_path(2) == "rounds/00000000000000000002/decision"
    assert topic_path("orders") == "topics/orders"


def test_remembered_keys_are_never_a_way_around_validation() -> None:
    from laminar_kafka.coordinator.codec import format_partition_key, parse_partition_key

    assert format_partition_key("t", 1) == "t:1" and parse_partition_key("t:1") == ("t", 1)
    for topic, partition in (("t", True), ("t", 1.0), ("bad topic", 1), ("t", -1)):
        with pytest.raises(CodecError):
            format_partition_key(topic, partition)  # type: ignore[arg-type]
    for key in ("t:01", "t:+1", ["t:1"], "bad topic:1", "t:2147483648"):
        with pytest.raises(CodecError):
            parse_partition_key(key)
    assert format_partition_key("t", 1) == "t:1" and parse_partition_key("t:1") == ("t", 1)  # still there


def test_is_int_takes_ints_and_never_a_bool_or_a_number_of_another_kind() -> None:
    from laminar_kafka.coordinator.codec import is_int

    assert all(is_int(v) for v in (0, -1, 2**70))
    assert not any(is_int(v) for v in (True, False, 1.0, "1", None, 1j))


@given(epoch=u64)
def test_an_epoch_ask_round_trips(epoch: int) -> None:
    assert parse_epoch_wanted(epoch_wanted_data(epoch)) == epoch


@pytest.mark.parametrize("raw", [b"", b"-1", b"01", b"1.0", b" 1", b"\xff", "\u0661".encode()])
def test_an_epoch_ask_that_is_not_a_plain_epoch_number_is_refused(raw: bytes) -> None:
    with pytest.raises(CodecError, match="epoch wanted"):
        parse_epoch_wanted(raw)
