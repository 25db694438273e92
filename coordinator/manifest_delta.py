"""Manifests stored as the change from a full one (format 2), so ZooKeeper's writes follow what moved.

A :class:`~laminar_kafka.coordinator.values.Manifest` is the whole durable truth of an epoch: every
cursor ever owned. Stored whole every epoch (format 1), its bytes grow with the partitions, not with
what changed: a pipeline of 1,000 idle partitions wrote about 35 KB of cursors per epoch. Format 2
stores manifest E as the cursors that differ from a *full* (format 1) manifest B < E, with E's own
outputs and acks; the value read back is the same full :class:`Manifest`::

    {"format_version": 2, "epoch": E, "assignment_version": V, "base_epoch": B,
     "base_digest": "<sha-256 of B's canonical full encoding, hex>",
     "cursors": {<source>: {<topic:partition>: <next offset>, ...}},  # those that differ from B's
     "outputs": [...], "acked_by": [[node, boot], ...]}

Rules, each checked by the decoder (a violation is a :class:`CodecError`, never a guess):

- a base is always full, so reading E reads at most one other manifest (depth one);
- ``base_epoch`` is in ``1 .. E-1`` (the pinned slot 0 may hold a seed of another epoch: never a base);
- the base's digest must match: a delta never decodes over a manifest other than its own (a control
  state restored from another copy, a slot written again);
- a delta only adds or moves cursors: every cursor of the base is in the manifest. Manifests never
  drop a cursor (the leader overlays acks on the previous manifest), and one that would is stored full.

The writer (:func:`encode_stored`) stores E full when it has no base, when ``E - B >= full_every``,
or when the delta would hold more than half the cursors; garbage collection keeps ``full_every``
manifests more than it must (:func:`collect_limit`), so the base of every manifest it keeps is kept
(the ZooKeeper store keeps that window even when its leader writes every manifest full: an earlier
leader may have written deltas).

Compatibility: a node of a release before format 2 refuses it in one line (``unknown format_version
2``); ``manifest-deltas=false`` makes a leader store every manifest full for a rolling upgrade (see
``docs/deploy.md``). This module does no I/O.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from laminar_kafka.coordinator.codec import (
    Cursors,
    decode_cursors,
    dumps,
    encode_cursors,
    expect_int,
    expect_object,
    expect_str,
    loads,
)
from laminar_kafka.coordinator.errors import CodecError
from laminar_kafka.coordinator.values import MANIFEST_FORMAT_VERSION, Manifest

__all__ = [
    "MANIFEST_DELTA_FORMAT_VERSION",
    "StoredEncoding",
    "changed_from",
    "collect_limit",
    "decode_stored",
    "encode_stored",
    "manifest_digest",
    "stored_format",
]

#: The format of a manifest stored as the change from a full one.
MANIFEST_DELTA_FORMAT_VERSION: int = 2

_DELTA_KEYS = ("format_version", "epoch", "assignment_version", "base_epoch", "base_digest", "cursors",
               "outputs", "acked_by")


@dataclass(frozen=True)
class StoredEncoding:
    """The bytes to store for a manifest, and whether they are full (format 1: it may be a base)."""

    data: bytes
    full: bool


def manifest_digest(manifest: Manifest) -> str:
    """SHA-256 (hex) of ``manifest``'s canonical full encoding: what a delta names its base by."""
    return hashlib.sha256(manifest.to_json()).hexdigest()


def changed_from(cursors: Cursors, base: Cursors) -> Cursors | None:
    """The cursors of ``cursors`` that differ from (or are missing in) ``base``, per source; None when
    ``base`` holds a cursor ``cursors`` lacks (a delta cannot drop one: store the manifest full)."""
    for source, parts in base.items():
        mine = cursors.get(source, {})
        if any(key not in mine for key in parts):
            return None
    changed: dict[str, dict[str, int]] = {}
    for source, parts in cursors.items():
        before = base.get(source, {})
        moved = {key: offset for key, offset in parts.items() if before.get(key) != offset}
        if moved:
            changed[source] = moved
    return changed


def _count(cursors: Cursors) -> int:
    return sum(len(parts) for parts in cursors.values())


def encode_stored(manifest: Manifest, base: Manifest | None, full_every: int) -> StoredEncoding:
    """The stored bytes of ``manifest``: a delta over ``base`` (a full manifest this store holds at slot
    ``base.epoch``) when that is allowed and smaller, else the full encoding. ``full_every`` >= 1:
    a delta's base is less than that many epochs older (garbage collection counts on it)."""
    if base is None or not 1 <= base.epoch < manifest.epoch or manifest.epoch - base.epoch >= full_every:
        return StoredEncoding(manifest.to_json(), True)
    changed = changed_from(manifest.cursors, base.cursors)
    if changed is None or 2 * _count(changed) > _count(manifest.cursors):
        return StoredEncoding(manifest.to_json(), True)
    data = dumps({
        "format_version": MANIFEST_DELTA_FORMAT_VERSION,
        "epoch": manifest.epoch,
        "assignment_version": manifest.assignment_version,
        "base_epoch": base.epoch,
        "base_digest": manifest_digest(base),
        "cursors": encode_cursors(changed),
        "outputs": list(manifest.outputs),
        "acked_by": [list(a) for a in manifest.acked_by],
    })
    return StoredEncoding(data, False)


def stored_format(raw: bytes) -> int:
    """The format version of stored manifest bytes; CodecError when not a JSON object or without one."""
    return _format_of(loads(raw, "manifest"))


def _format_of(data: object) -> int:
    if not isinstance(data, dict):
        raise CodecError(f"manifest must be a JSON object, got {type(data).__name__}")
    if "format_version" not in data:
        raise CodecError("manifest: format_version is missing")
    return expect_int(data["format_version"], "manifest: format_version")


def decode_stored(raw: bytes, base_of: Callable[[int], Manifest]) -> tuple[Manifest, bool]:
    """The manifest stored as ``raw``, and whether it is stored full: format 1 decoded whole, format 2
    over its base.

    ``base_of(epoch)`` returns the manifest stored full at slot ``epoch`` (and raises when it cannot:
    absent, collected, itself a delta). CodecError when ``raw`` is malformed, names a base outside
    ``1 .. epoch-1``, a base whose digest differs, or drops a cursor of its base.
    """
    parsed = loads(raw, "manifest")
    version = _format_of(parsed)
    if version == MANIFEST_FORMAT_VERSION:
        return Manifest.from_json(raw), True
    if version != MANIFEST_DELTA_FORMAT_VERSION:
        raise CodecError(f"manifest: unknown format_version {version} (this code reads {MANIFEST_FORMAT_VERSION} "
                         f"and {MANIFEST_DELTA_FORMAT_VERSION})")
    data = expect_object(parsed, "manifest delta", _DELTA_KEYS)
    epoch = expect_int(data["epoch"], "manifest delta: epoch")
    base_epoch = expect_int(data["base_epoch"], "manifest delta: base_epoch")
    if not 1 <= base_epoch < epoch:
        raise CodecError(f"manifest delta {epoch}: base_epoch {base_epoch} is not in 1..{epoch - 1}")
    digest = expect_str(data["base_digest"], "manifest delta: base_digest", nonempty=True)
    changed = decode_cursors(data["cursors"], "manifest delta: cursors")
    # outputs and acked_by are checked by the full decoder, on the manifest they make
    whole = Manifest.from_json(dumps({
        "epoch": epoch, "assignment_version": data["assignment_version"], "cursors": {},
        "outputs": data["outputs"], "acked_by": data["acked_by"], "format_version": MANIFEST_FORMAT_VERSION,
    }))
    base = base_of(base_epoch)
    if base.epoch != base_epoch:
        raise CodecError(f"manifest delta {epoch}: slot {base_epoch} holds manifest {base.epoch}")
    if manifest_digest(base) != digest:
        raise CodecError(f"manifest delta {epoch}: base manifest {base_epoch} is not the one it was written over "
                         "(digest differs): the control state was rewritten or restored from another copy")
    cursors = {source: dict(parts) for source, parts in base.cursors.items()}
    for source, parts in changed.items():
        cursors.setdefault(source, {}).update(parts)
    return Manifest(whole.epoch, whole.assignment_version, cursors, whole.outputs, whole.acked_by), False


def collect_limit(last_epoch: int, keep: int, full_every: int) -> int:
    """The newest manifest garbage collection may delete: it keeps the last ``keep`` and, since a
    kept delta's base is less than ``full_every`` epochs older, ``full_every`` more."""
    return last_epoch - keep - full_every
