"""Round identities: :class:`AssignmentDrainId`, its digest, its JSON codec and round path names.

A *round* moves the published assignment from version ``v`` to ``v + 1``. Its identity
``AssignmentDrainId(predecessor_version=v, target_version=v + 1, digest)`` names it everywhere: in the
registry's pending target, in the source's drain calls and in ZooKeeper (``rounds/<round_id>``).

The digest binds the predecessor version, both owner maps and the leader's fencing token, so two
leaders (or one leader before and after a re-election) can never produce the same id for different
rounds.

Canonical byte encoding hashed by :func:`drain_digest` (all integers little-endian, unsigned)::

    b"laminar.coordinator.drain-digest.v1\\0"       # domain tag, 36 bytes incl. the NUL
    u64(predecessor_version)
    u64(len(predecessor_owners)) + u64(owner) for each predecessor owner, in vnode order
    u64(len(target_owners))      + u64(owner) for each target owner, in vnode order
    u64(leader_token)

``digest = xxh3_64(encoding)`` (seed 0), except that a hash of ``0`` is reported as ``1``: zero is
reserved to mean "no digest", so a canonical id always carries a nonzero digest.

This module does no I/O.
"""
from __future__ import annotations

import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import xxhash

from laminar_kafka.coordinator.codec import U64_MAX, is_int
from laminar_kafka.coordinator.errors import RoundError

__all__ = [
    "U64_MAX",
    "DRAIN_DIGEST_DOMAIN",
    "ROUND_ID_WIDTH",
    "AssignmentDrainId",
    "drain_digest",
    "round_id",
    "parse_round_id",
]

DRAIN_DIGEST_DOMAIN: bytes = b"laminar.coordinator.drain-digest.v1\0"
#: Width of a round id: enough decimal digits for any u64, so names sort like the numbers they hold.
ROUND_ID_WIDTH: int = 20

_JSON_KEYS: frozenset[str] = frozenset({"predecessor_version", "target_version", "digest"})
_ROUND_ID_RE = re.compile(r"[0-9]{%d}" % ROUND_ID_WIDTH)


def _is_u64(value: object) -> bool:
    return is_int(value) and 0 <= value <= U64_MAX


def _pack_owners(owners: Sequence[int], what: str) -> bytes:
    for vnode, owner in enumerate(owners):
        if not _is_u64(owner):
            raise RoundError(f"{what}[{vnode}] = {owner!r} is not a u64 node id")
    return struct.pack("<Q", len(owners)) + struct.pack(f"<{len(owners)}Q", *owners)


def drain_digest(
    predecessor_version: int,
    predecessor_owners: Sequence[int],
    target_owners: Sequence[int],
    leader_token: int,
) -> int:
    """The nonzero u64 digest binding a round to both owner maps and the leader's fencing token.

    Pre: every argument is a u64 (owners element-wise) and both owner maps have the same length.
    Post: the result is in ``1..2**64-1``; it changes whenever any input changes (up to hash
    collisions). See the module docstring for the exact byte encoding.
    """
    if not _is_u64(predecessor_version):
        raise RoundError(f"predecessor_version {predecessor_version!r} is not a u64")
    if not _is_u64(leader_token):
        raise RoundError(f"leader_token {leader_token!r} is not a u64")
    if len(predecessor_owners) != len(target_owners):
        raise RoundError(
            f"owner maps differ in length: predecessor has {len(predecessor_owners)} vnodes, "
            f"target has {len(target_owners)}"
        )
    encoding = b"".join(
        (
            DRAIN_DIGEST_DOMAIN,
            struct.pack("<Q", predecessor_version),
            _pack_owners(predecessor_owners, "predecessor_owners"),
            _pack_owners(target_owners, "target_owners"),
            struct.pack("<Q", leader_token),
        )
    )
    digest = xxhash.xxh3_64_intdigest(encoding)
    return digest if digest != 0 else 1


class OwnerMap(Protocol):
    """What a round starts from: a versioned owner map (a registry's ``AssignmentSnapshot``)."""

    @property
    def version(self) -> int: ...

    @property
    def owners(self) -> Sequence[int]: ...


@dataclass(frozen=True, slots=True)
class AssignmentDrainId:
    """Identity of one assignment round (drain -> decision -> new version).

    Any ints can be held (so a non-canonical id received from elsewhere can be inspected and rejected),
    but only a canonical id may be used to run a round, encoded, or decoded; see :meth:`is_canonical`.
    """

    predecessor_version: int
    target_version: int
    digest: int

    def is_canonical(self) -> bool:
        """True iff predecessor != 0, target == predecessor + 1, digest != 0, and all three are u64."""
        return (
            _is_u64(self.predecessor_version)
            and _is_u64(self.target_version)
            and _is_u64(self.digest)
            and self.predecessor_version != 0
            and self.target_version == self.predecessor_version + 1
            and self.digest != 0
        )

    def require_canonical(self) -> AssignmentDrainId:
        """Return ``self`` if canonical, else raise :class:`RoundError` naming the id."""
        if not self.is_canonical():
            raise RoundError(f"non-canonical assignment drain id {self}")
        return self

    @classmethod
    def for_round(
        cls,
        predecessor: OwnerMap,
        target_owners: Sequence[int],
        leader_token: int,
    ) -> AssignmentDrainId:
        """The canonical id of the round that moves ``predecessor`` to ``target_owners``.

        Pre: ``predecessor.version >= 1`` (version 0, "nothing assigned yet", is left by a plain
        publication, not a round) and ``len(target_owners) == predecessor.vnode_count``.
        Post: ``target_version == predecessor.version + 1`` and the id is canonical.
        """
        if predecessor.version == 0:
            raise RoundError("a round cannot start from version 0; publish the first assignment directly")
        digest = drain_digest(predecessor.version, predecessor.owners, target_owners, leader_token)
        return cls(predecessor.version, predecessor.version + 1, digest).require_canonical()

    def to_json(self) -> dict[str, int]:
        """The id as a JSON-ready dict of three ints. Pre: the id is canonical (else RoundError)."""
        self.require_canonical()
        return {
            "predecessor_version": self.predecessor_version,
            "target_version": self.target_version,
            "digest": self.digest,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AssignmentDrainId:
        """Strict inverse of :meth:`to_json`.

        Raises :class:`RoundError` unless ``data`` is a mapping with exactly the three keys, each an
        int (not a bool) in u64 range, forming a canonical id.
        """
        if not isinstance(data, Mapping):
            raise RoundError(f"drain id must be a JSON object, got {type(data).__name__}")
        keys = set(data.keys())
        if keys != _JSON_KEYS:
            missing = sorted(_JSON_KEYS - keys)
            unknown = sorted(str(k) for k in keys - _JSON_KEYS)
            raise RoundError(f"drain id keys mismatch: missing {missing}, unknown {unknown}")
        for key in sorted(_JSON_KEYS):
            if not _is_u64(data[key]):
                raise RoundError(f"drain id field {key!r} = {data[key]!r} is not a u64 integer")
        drain_id = cls(int(data["predecessor_version"]), int(data["target_version"]), int(data["digest"]))
        return drain_id.require_canonical()


def round_id(target_version: int) -> str:
    """The path-safe name of the round targeting ``target_version``: 20 zero-padded decimal digits.

    Names sort lexicographically in numeric order. Pre: ``1 <= target_version <= 2**64-1``.
    """
    if not _is_u64(target_version) or target_version == 0:
        raise RoundError(f"round target version {target_version!r} must be an integer in 1..2**64-1")
    return f"{target_version:0{ROUND_ID_WIDTH}d}"


def parse_round_id(name: str) -> int:
    """Strict inverse of :func:`round_id`: exactly 20 ASCII digits denoting a value in ``1..2**64-1``."""
    if not isinstance(name, str) or _ROUND_ID_RE.fullmatch(name) is None:
        raise RoundError(f"invalid round id {name!r}: expected {ROUND_ID_WIDTH} ASCII digits")
    value = int(name)
    if value == 0 or value > U64_MAX:
        raise RoundError(f"invalid round id {name!r}: value out of range 1..2**64-1")
    return value
