"""The CDC audit's model (pure: no I/O): a topic's change events -> the final state of every key
(:func:`final_state`), and the comparison of a table with it (:func:`compare`).

The final state is the topic's own: per key, its change with the highest offset wins (a key's
changes live in one partition); a delete (``op`` ``d``, or a tombstone) leaves the key absent; any
other change (``c``, ``r``, ``u``) leaves its ``after`` row. The comparison counts, as evidence of a
lake that is not the final state: keys *missing* (expected, absent), keys *undeleted* (present,
though their last change deletes them), keys *stale* (present with another change's values or
offset), *duplicated* rows (a key in the table more than once: every row past the first), and
*unexpected* keys (in the table, never changed in the topic). And the producer's view: a key whose
last *acknowledged* change is newer than the change the table shows is *acked_lost* (an
acknowledged change lost in the lake).

Written apart from :mod:`laminar_kafka.cluster.ops.verify_upsert` on purpose: ``verify`` reduces the
topic with the product's own :func:`~laminar_kafka.cluster.lake.iceberg.upsert.reduce_changes`, the
function the commit applies, so a fault of that reduction would pass both; this model, per key in
plain Python, and its payload comparison (``seq``, ``val``) are the campaign's independent oracle.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["CdcComparison", "Change", "compare", "decode_change", "final_state"]

#: the columns a table row is compared on (besides the key): the row's payload and where it came from
COMPARED = ("seq", "val", "_partition", "_offset")


@dataclass(frozen=True)
class Change:
    """One change event of the topic: ``key``'s change at ``partition``/``offset``; ``after`` is the
    row it leaves (None: the change deletes the key)."""

    key: int
    partition: int
    offset: int
    op: str
    after: Mapping[str, object] | None = None

    @property
    def deletes(self) -> bool:
        return self.after is None


def decode_change(key: bytes | None, value: bytes | None, partition: int, offset: int,
                  key_field: str = "id") -> Change:
    """A record of the CDC producer -> its :class:`Change`: the key from the record key (Debezium's
    ``{"id": N}``); a null value is a tombstone (a delete, ``op`` ``"tombstone"``); otherwise the
    envelope's ``op`` and ``after`` (``d``: no row). Raises ValueError for a record without a key or
    with a value that is not such an envelope."""
    if key is None:
        raise ValueError(f"partition {partition} offset {offset}: a record without a key")
    decoded_key = json.loads(key)
    if not isinstance(decoded_key, dict) or not isinstance(decoded_key.get(key_field), int):
        raise ValueError(f"partition {partition} offset {offset}: key {key!r} has no integer {key_field!r}")
    ident = int(decoded_key[key_field])
    if value is None:
        return Change(ident, partition, offset, "tombstone")
    envelope = json.loads(value)
    op = envelope.get("op") if isinstance(envelope, dict) else None
    if op not in ("c", "r", "u", "d"):
        raise ValueError(f"partition {partition} offset {offset}: not a change event (op {op!r})")
    after = envelope.get("after")
    if op == "d":
        return Change(ident, partition, offset, op)
    if not isinstance(after, dict):
        raise ValueError(f"partition {partition} offset {offset}: op {op!r} without an 'after' row")
    return Change(ident, partition, offset, op, after)


def final_state(changes: Iterable[Change]) -> dict[int, Change]:
    """key -> its last change (highest offset). Raises ValueError naming a key changed in two
    partitions (the producer keeps each key in one)."""
    last: dict[int, Change] = {}
    for change in changes:
        seen = last.get(change.key)
        if seen is not None and seen.partition != change.partition:
            raise ValueError(f"key {change.key} changed in partitions {seen.partition} and {change.partition}")
        if seen is None or change.offset > seen.offset:
            last[change.key] = change
    return last


@dataclass(frozen=True)
class CdcComparison:
    """What :func:`compare` found (see the module docstring); ``evidence``: the first keys of each
    finding, one line each."""

    keys: int
    rows: int
    missing: int = 0
    undeleted: int = 0
    stale: int = 0
    duplicated: int = 0
    unexpected: int = 0
    acked_lost: int = 0
    evidence: tuple[str, ...] = field(default=())

    @property
    def exact(self) -> bool:
        return not (self.missing or self.undeleted or self.stale or self.duplicated or self.unexpected
                    or self.acked_lost)


def _first(keys: Iterable[int], limit: int = 5) -> list[int]:
    return sorted(keys)[:limit]


def compare(final: Mapping[int, Change], rows: Sequence[Mapping[str, object]], acked: Mapping[int, int] | None = None,
            *, key_field: str = "id", label: str = "") -> CdcComparison:
    """The table's ``rows`` (dicts by column: the key field and :data:`COMPARED`) against ``final``
    (:func:`final_state`). ``acked``: key -> offset of its last acknowledged change. ``label``
    prefixes the evidence lines (the reader: pyiceberg, duckdb)."""
    by_key: dict[int, list[Mapping[str, object]]] = {}
    for row in rows:
        value = row.get(key_field)
        by_key.setdefault(int(value) if isinstance(value, int) else -1, []).append(row)
    live = {k: c for k, c in final.items() if not c.deletes}
    missing = set(live) - set(by_key)
    undeleted = {k for k in by_key if k in final and final[k].deletes}
    unexpected = set(by_key) - set(final)
    duplicated = {k: len(v) - 1 for k, v in by_key.items() if len(v) > 1}
    stale: dict[int, str] = {}
    for key in set(live) & set(by_key):
        after = live[key].after or {}
        want = {"seq": after.get("seq"), "val": after.get("val"), "_partition": live[key].partition,
                "_offset": live[key].offset}
        got = {name: by_key[key][0].get(name) for name in COMPARED}
        if got != want:
            stale[key] = f"{key}: table {got}, last change {want}"
    lost: dict[int, str] = {}
    for key, acked_offset in (acked or {}).items():
        shown = by_key.get(key)
        shown_offset = shown[0].get("_offset") if shown else None
        change = final.get(key)
        if shown is None and change is not None and change.deletes and change.offset >= acked_offset:
            continue  # deleted by a change at or after the acknowledged one
        if isinstance(shown_offset, int) and shown_offset >= acked_offset:
            continue
        lost[key] = f"{key}: acknowledged change at offset {acked_offset}, table shows offset {shown_offset}"
    prefix = f"{label}: " if label else ""
    evidence = []
    for name, found in (("missing", {k: "" for k in missing}), ("undeleted", {k: "" for k in undeleted}),
                        ("unexpected", {k: "" for k in unexpected}), ("duplicated", duplicated),
                        ("stale", stale), ("acknowledged change lost", lost)):
        if found:
            first = _first(found)
            details = "; ".join(str(found[k]) for k in first if isinstance(found[k], str) and found[k])
            evidence.append(f"{prefix}{len(found)} key(s) {name}, first {first}" + (f" ({details})" if details else ""))
    return CdcComparison(keys=len(live), rows=len(rows), missing=len(missing), undeleted=len(undeleted),
                         stale=len(stale), duplicated=sum(duplicated.values()), unexpected=len(unexpected),
                         acked_lost=len(lost), evidence=tuple(evidence))
