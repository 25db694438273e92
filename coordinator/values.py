"""The values a coordinator stores and exchanges: members, epoch acks, manifests, round outcomes.

Each durable value has a canonical JSON encoding (``to_json``) and a strict decoder (``from_json``,
built on :mod:`laminar_kafka.coordinator.codec`): a wrong type, a bool or string where an integer belongs, a
negative or out-of-range number, a missing or unknown key, or an unknown format version raises
:class:`~laminar_kafka.coordinator.errors.CodecError` naming the field. Nothing is coerced.

Format versions: a manifest (the durable truth for recovery, kept for the pipeline's life) carries
``"format_version": 1`` (required); any other version is rejected. Acks and members live only as long as their epoch or session and
carry no version.

This module does no I/O.
"""
from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass

from laminar_kafka.coordinator.codec import (
    Cursors,
    decode_cursors,
    dumps,
    encode_cursors,
    expect_bool,
    expect_int,
    expect_list,
    expect_object,
    expect_str,
    is_topic_name,
    loads,
)
from laminar_kafka.coordinator.errors import CodecError, CoordinatorError
from laminar_kafka.coordinator.vnodes.registry import NodeId
from laminar_kafka.errors import ConfigurationError

__all__ = [
    "MANIFEST_FORMAT_VERSION",
    "Cursors",
    "RoundOutcome",
    "Member",
    "EpochAck",
    "Manifest",
    "initial_manifest",
    "check_initial_manifest",
    "check_seed_manifest",
    "check_topic_ids",
]

#: The manifest encoding this code writes (and the only one it reads; absent means 1).
MANIFEST_FORMAT_VERSION: int = 1


class RoundOutcome(enum.Enum):
    """The create-once decision of a round."""

    COMMIT = "commit"
    ABORT = "abort"


def _node_id(value: object, what: str) -> NodeId:
    return expect_int(value, what, minimum=1)


def _outputs(value: object, what: str) -> tuple[str, ...]:
    return tuple(expect_str(o, f"{what}[{i}]") for i, o in enumerate(expect_list(value, what)))


@dataclass(frozen=True)
class Member:
    """A live member of the pipeline."""

    node_id: NodeId
    boot_id: str
    endpoint: str = ""
    leaving: bool = False

    def to_json(self) -> bytes:
        """The member node's data (the node id is the node's name, not part of the data)."""
        return dumps({"boot_id": self.boot_id, "endpoint": self.endpoint, "leaving": self.leaving})

    @classmethod
    def from_json(cls, node_id: NodeId, raw: bytes) -> Member:
        """Strict decoding of a member node's data; CodecError when malformed."""
        what = f"member {node_id}"
        data = expect_object(loads(raw, what), what, ("boot_id", "endpoint", "leaving"))
        return cls(
            node_id,
            expect_str(data["boot_id"], f"{what}: boot_id", nonempty=True),
            expect_str(data["endpoint"], f"{what}: endpoint"),
            expect_bool(data["leaving"], f"{what}: leaving"),
        )


_ACK_KEYS = ("node_id", "boot_id", "epoch", "assignment_version", "cursors", "outputs")


@dataclass(frozen=True)
class EpochAck:
    """A node's answer to an epoch barrier.

    Valid only when `boot_id` is the node's live boot id and `assignment_version` equals the epoch's
    version; otherwise it is rejected (and counted). `cursors` hold only partitions the node owned at
    that version: all of them, or only those whose cursor moved since the previous manifest (the
    manifest overlays the acks on it); `outputs` are its staged output paths for this epoch.
    """

    node_id: NodeId
    boot_id: str
    epoch: int
    assignment_version: int
    cursors: Cursors
    outputs: tuple[str, ...] = ()

    def to_json(self) -> bytes:
        return dumps({
            "node_id": self.node_id,
            "boot_id": self.boot_id,
            "epoch": self.epoch,
            "assignment_version": self.assignment_version,
            "cursors": encode_cursors(self.cursors),
            "outputs": list(self.outputs),
        })

    @classmethod
    def from_json(cls, raw: bytes) -> EpochAck:
        """Strict decoding (see the module docstring); CodecError when malformed."""
        data = expect_object(loads(raw, "epoch ack"), "epoch ack", _ACK_KEYS)
        return cls(
            node_id=_node_id(data["node_id"], "epoch ack: node_id"),
            boot_id=expect_str(data["boot_id"], "epoch ack: boot_id", nonempty=True),
            epoch=expect_int(data["epoch"], "epoch ack: epoch"),
            assignment_version=expect_int(data["assignment_version"], "epoch ack: assignment_version"),
            cursors=decode_cursors(data["cursors"], "epoch ack: cursors"),
            outputs=_outputs(data["outputs"], "epoch ack: outputs"),
        )


_MANIFEST_KEYS = ("epoch", "assignment_version", "cursors", "outputs", "acked_by")


@dataclass(frozen=True)
class Manifest:
    """The durable record of a committed epoch: the truth for recovery.

    `cursors` cover every partition ever owned (a partition missing from every ack keeps its cursor
    from the previous manifest); `outputs` list the staged files to publish for this epoch.
    """

    epoch: int
    assignment_version: int
    cursors: Cursors
    outputs: tuple[str, ...] = ()
    acked_by: tuple[tuple[NodeId, str], ...] = ()

    def to_json(self) -> bytes:
        return dumps({
            "epoch": self.epoch,
            "assignment_version": self.assignment_version,
            "cursors": encode_cursors(self.cursors),
            "outputs": list(self.outputs),
            "acked_by": [list(a) for a in self.acked_by],
            "format_version": MANIFEST_FORMAT_VERSION,
        })

    @classmethod
    def from_json(cls, raw: bytes) -> Manifest:
        """Strict decoding (see the module docstring); CodecError when malformed."""
        data = loads(raw, "manifest")
        if isinstance(data, dict) and "format_version" in data:  # the version first: another format has other keys
            version = expect_int(data["format_version"], "manifest: format_version")
            if version != MANIFEST_FORMAT_VERSION:
                raise CodecError(f"manifest: format_version {version} is not the full format "
                                 f"{MANIFEST_FORMAT_VERSION} (a stored delta is read by manifest_delta.decode_stored)")
        data = expect_object(data, "manifest", (*_MANIFEST_KEYS, "format_version"))
        acked_by = []
        for i, pair in enumerate(expect_list(data["acked_by"], "manifest: acked_by")):
            what = f"manifest: acked_by[{i}]"
            if not isinstance(pair, list) or len(pair) != 2:
                raise CodecError(f"{what} must be a [node_id, boot_id] pair")
            acked_by.append((_node_id(pair[0], f"{what} node_id"), expect_str(pair[1], f"{what} boot_id", True)))
        return cls(
            epoch=expect_int(data["epoch"], "manifest: epoch"),
            assignment_version=expect_int(data["assignment_version"], "manifest: assignment_version"),
            cursors=decode_cursors(data["cursors"], "manifest: cursors"),
            outputs=_outputs(data["outputs"], "manifest: outputs"),
            acked_by=tuple(acked_by),
        )


def initial_manifest(cursors: Cursors, assignment_version: int = 0) -> Manifest:
    """The pipeline's initial manifest for `pin_start`: epoch 0, no outputs, no acks, `cursors` = the
    start position resolved once (per source identity, `topic:partition` -> next offset to read)."""
    return Manifest(0, assignment_version, {s: dict(c) for s, c in cursors.items()})


def check_initial_manifest(manifest: Manifest) -> None:
    """Raise CoordinatorError unless `manifest` is an initial manifest (epoch 0, no outputs, no acks)."""
    if manifest.epoch != 0 or manifest.outputs or manifest.acked_by:
        raise CoordinatorError(
            f"an initial manifest has epoch 0, no outputs and no acks; got epoch {manifest.epoch}, "
            f"{len(manifest.outputs)} outputs, {len(manifest.acked_by)} acks"
        )


def check_seed_manifest(manifest: Manifest) -> None:
    """Raise CoordinatorError unless `manifest` can be the pinned manifest of a control state: an initial
    manifest, or the seed of one reseeded from the lake (`Coordinator.rebase`): epoch S >= 0, after
    which the pipeline's epochs continue, no outputs, no acks."""
    if manifest.outputs or manifest.acked_by:
        raise CoordinatorError(
            f"a seed manifest has no outputs and no acks; got epoch {manifest.epoch}, "
            f"{len(manifest.outputs)} outputs, {len(manifest.acked_by)} acks"
        )


_SETTING_NAME = re.compile(r"[a-z0-9._-]{1,100}")


def check_setting_name(name: str) -> None:
    """Raise ConfigurationError unless ``name`` is a legal pipeline setting name (``[a-z0-9._-]+``)."""
    if not isinstance(name, str) or not _SETTING_NAME.fullmatch(name) or name in (".", ".."):
        raise ConfigurationError(f"setting name {name!r} must match [a-z0-9._-]+")


def check_topic_ids(ids: Mapping[str, str]) -> None:
    """Raise ConfigurationError unless every key is a legal Kafka topic name and every id a non-empty str."""
    for topic, topic_id in ids.items():
        if not is_topic_name(topic):
            raise ConfigurationError(f"topic name {topic!r} is not a legal Kafka topic name")
        if not isinstance(topic_id, str) or not topic_id:
            raise ConfigurationError(f"topic id {topic_id!r} of {topic!r} must be a non-empty str")
