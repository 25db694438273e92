"""Strict decoding primitives for every durable record of the coordinator, and the cursor codec.

Every record the coordinator stores (manifests, acks, members, the register, round records, chunk
headers, rejection markers) is canonical JSON written by this package and decoded with these
primitives, which never coerce: an integer field must be a JSON integer (not a bool, not a float, not
a string), in range; an object must hold exactly the expected keys; a string must be a string.
Anything else raises :class:`CodecError` with a message naming the record and the field.

Cursors (the exact position of every source, the heart of manifests and acks) have one codec::

    {"<source identity>": {"<topic>:<partition>": <next offset to read>, ...}, ...}

where the key is :func:`format_partition_key` (a legal Kafka topic name, a colon, the canonical
decimal partition in ``0..2**31-1``) and the offset is in ``0..2**63-1``. The Kafka source's
checkpoint codec (:mod:`laminar_kafka.kafka_source.checkpoint`) uses the same key functions.

This module does no I/O.
"""
from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeGuard

from laminar_kafka.coordinator.errors import CodecError

__all__ = [
    "U64_MAX",
    "OFFSET_MAX",
    "PARTITION_MAX",
    "PartitionKey",
    "Cursors",
    "CodecError",
    "is_int",
    "loads",
    "dumps",
    "expect_object",
    "expect_int",
    "expect_str",
    "expect_bool",
    "expect_list",
    "is_topic_name",
    "format_partition_key",
    "parse_partition_key",
    "encode_cursors",
    "decode_cursors",
]

U64_MAX: int = 2**64 - 1
#: Kafka offsets are signed 64-bit; a next offset to read is never negative.
OFFSET_MAX: int = 2**63 - 1
PARTITION_MAX: int = 2**31 - 1

#: ``"topic:partition"``, a cursor key (:func:`format_partition_key`); the same partition as a tuple
#: is :data:`laminar_kafka.coordinator.vnodes.routing.TopicPartitionId`
PartitionKey = str

#: source identity -> "topic:partition" -> next offset to read
Cursors = Mapping[str, Mapping[PartitionKey, int]]

_TOPIC_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")
_PARTITION_RE = re.compile(r"0|[1-9][0-9]{0,9}")


# ---- JSON ----------------------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise CodecError(f"non-standard JSON constant {name}")


class _Fraction:
    """A JSON number with a fraction or exponent: no field accepts one, so the field's own check
    rejects it by name (this is never returned from a decoder)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"{self.text} (a fraction)"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)  # in C: a manifest's cursors object holds every partition's key
    if len(result) == len(pairs):
        return result
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise CodecError(f"duplicate key {key!r}")
        seen.add(key)
    return result


def loads(raw: bytes | bytearray | memoryview | str, what: str) -> Any:
    """Parse strict JSON: UTF-8, no NaN/Infinity, no duplicate keys; a number with a fraction parses
    to a value every ``expect_*`` check rejects.

    ``what`` names the record in the error (for example ``"manifest"``).
    """
    try:
        text = raw if isinstance(raw, str) else bytes(raw).decode("utf-8")
    except (UnicodeDecodeError, TypeError) as exc:
        raise CodecError(f"malformed {what}: not UTF-8 bytes", cause=exc) from exc
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_Fraction,
                          object_pairs_hook=_no_duplicates)
    except CodecError as exc:
        raise CodecError(f"malformed {what}: {exc.message}", cause=exc) from exc
    except (ValueError, RecursionError) as exc:
        raise CodecError(f"malformed {what}: not valid JSON ({exc})", cause=exc) from exc


def dumps(value: Any) -> bytes:
    """Compact JSON bytes (key order as given: encoders build their dicts in canonical order)."""
    return json.dumps(value, separators=(",", ":")).encode()


# ---- primitives ----------------------------------------------------------------------------------


def is_int(value: object) -> TypeGuard[int]:
    """True iff ``value`` is an int and not a bool (JSON and Python both let ``True`` pass for 1).

    The one integer test of the project's strict checks (codecs, routing, placement, checkpoints)."""
    return isinstance(value, int) and not isinstance(value, bool)


def expect_object(
    value: object, what: str, required: Iterable[str], optional: Iterable[str] = ()
) -> dict[str, Any]:
    """``value`` as a dict holding every ``required`` key, possibly ``optional`` ones, and no other."""
    if not isinstance(value, dict):
        raise CodecError(f"{what} must be a JSON object, got {type(value).__name__}")
    required_keys, allowed = set(required), set(required) | set(optional)
    keys = set(value)
    if not required_keys <= keys or not keys <= allowed:
        missing = sorted(required_keys - keys)
        unknown = sorted(str(k) for k in keys - allowed)
        raise CodecError(f"{what} keys mismatch: missing {missing}, unknown {unknown}")
    return value


def expect_int(value: object, what: str, minimum: int = 0, maximum: int = U64_MAX) -> int:
    """``value`` as an int (never a bool) in ``minimum..maximum`` (default: a u64)."""
    if not is_int(value):
        raise CodecError(f"{what} = {value!r} must be an integer")
    if not minimum <= value <= maximum:
        raise CodecError(f"{what} = {value} is out of range {minimum}..{maximum}")
    return value


def expect_str(value: object, what: str, nonempty: bool = False) -> str:
    """``value`` as a str (non-empty if asked)."""
    if not isinstance(value, str):
        raise CodecError(f"{what} = {value!r} must be a string")
    if nonempty and not value:
        raise CodecError(f"{what} must be a non-empty string")
    return value


def expect_bool(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise CodecError(f"{what} = {value!r} must be true or false")
    return value


def expect_list(value: object, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise CodecError(f"{what} must be a JSON array, got {type(value).__name__}")
    return value


# ---- partition keys and cursors -------------------------------------------------------------------


def is_topic_name(topic: object) -> bool:
    """True iff ``topic`` is a legal Kafka topic name (also a safe path segment)."""
    return isinstance(topic, str) and _TOPIC_RE.fullmatch(topic) is not None and topic not in (".", "..")


#: distinct keys remembered by :func:`format_partition_key` and :func:`parse_partition_key` (a
#: checkpoint of N partitions is built on every poll: 1.26 ms for 1000 partitions, validated afresh)
KEY_CACHE_SIZE = 1 << 16


def format_partition_key(topic: str, partition: int) -> PartitionKey:
    """The cursor key ``"topic:partition"``. Pre: a legal Kafka topic name, ``0 <= partition < 2**31``
    (CodecError otherwise). Valid keys are remembered (:data:`KEY_CACHE_SIZE`)."""
    if type(topic) is str and type(partition) is int:  # exact types: a bool is no partition
        return _valid_key(topic, partition)
    return _checked_key(topic, partition)


def parse_partition_key(key: object) -> tuple[str, int]:
    """Strict inverse of :func:`format_partition_key`; CodecError on any non-canonical key. Valid
    keys are remembered (:data:`KEY_CACHE_SIZE`)."""
    if type(key) is not str:
        raise CodecError(f"cursor key {key!r} is not a string")
    return _parsed_key(key)


@functools.lru_cache(maxsize=KEY_CACHE_SIZE)
def _valid_key(topic: str, partition: int) -> str:
    return _checked_key(topic, partition)


def _checked_key(topic: object, partition: object) -> str:
    if not is_topic_name(topic):
        raise CodecError(f"invalid topic name {topic!r}")
    if not is_int(partition) or not 0 <= partition <= PARTITION_MAX:
        raise CodecError(f"invalid partition {partition!r} for topic {topic!r}")
    return f"{topic}:{partition}"


@functools.lru_cache(maxsize=KEY_CACHE_SIZE)
def _parsed_key(key: str) -> tuple[str, int]:
    topic, sep, part = key.rpartition(":")
    if not sep or not _PARTITION_RE.fullmatch(part):
        raise CodecError(f"cursor key {key!r} is not 'topic:partition'")
    partition = int(part)
    _checked_key(topic, partition)  # validates the topic and the partition range
    return topic, partition


def encode_cursors(cursors: Cursors) -> dict[str, dict[str, int]]:
    """Cursors as canonical JSON-ready dicts (sources and keys sorted)."""
    return {source: dict(sorted(parts.items())) for source, parts in sorted(cursors.items())}


def decode_cursors(value: object, what: str) -> dict[str, dict[str, int]]:
    """Strict inverse of :func:`encode_cursors`: non-empty source identities, canonical partition keys,
    offsets in ``0..2**63-1``."""
    if not isinstance(value, dict):
        raise CodecError(f"{what} must be a JSON object, got {type(value).__name__}")
    result: dict[str, dict[str, int]] = {}
    for source, parts in value.items():
        expect_str(source, f"{what}: source identity", nonempty=True)
        if not isinstance(parts, dict):
            raise CodecError(f"{what}[{source!r}] must be a JSON object, got {type(parts).__name__}")
        if _all_canonical(parts):
            result[source] = dict(parts)
            continue
        decoded: dict[str, int] = {}
        for key, offset in parts.items():
            try:
                parse_partition_key(key)
            except CodecError as exc:
                raise CodecError(f"{what}[{source!r}]: {exc.message}", cause=exc) from exc
            decoded[key] = expect_int(offset, f"{what}[{source!r}][{key!r}]", 0, OFFSET_MAX)
        result[source] = decoded
    return result


#: every key of a cursors object at once, one per line: ``topic:partition`` (the topic and partition
#: rules of :func:`format_partition_key` but for a partition's upper bound and the ``.``/``..`` topics)
_KEYS_RE = re.compile(r"(?:[A-Za-z0-9._-]{1,249}:(?:0|[1-9][0-9]{0,9})\n)*")
_TEN_DIGITS_RE = re.compile(r":([0-9]{10})\n")


def _all_canonical(parts: dict[Any, Any]) -> bool:
    """True iff every key of ``parts`` is a canonical partition key and every value an offset in
    ``0..OFFSET_MAX``: the checks of :func:`decode_cursors` over the whole object in a few C calls (a
    100,000-partition manifest decoded in a quarter of the time). False sends the caller to the checks
    key by key, which name the first offender."""
    if not parts:
        return True
    keys, offsets = list(parts), list(parts.values())
    if not all(type(k) is str for k in keys) or not all(type(v) is int for v in offsets):
        return False  # a bool, a fraction or another type: never an offset
    if min(offsets) < 0 or max(offsets) > OFFSET_MAX:
        return False
    joined = "\n".join(keys) + "\n"
    if joined.count("\n") != len(keys) or _KEYS_RE.fullmatch(joined) is None:
        return False  # a line break inside a key would pass for two keys: counted first
    if joined.startswith((".:", "..:")) or "\n.:" in joined or "\n..:" in joined:
        return False
    # ten digits may pass PARTITION_MAX: those few partitions are checked one by one
    return all(int(digits) <= PARTITION_MAX for digits in _TEN_DIGITS_RE.findall(joined))

