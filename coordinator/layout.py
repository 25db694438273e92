"""The ZooKeeper layout of a pipeline: every path, the bytes of every record, and the chunk codec.

All paths are relative to the pipeline's subtree ``<root>/<pipeline>`` (:func:`pipeline_path`)::

    members/<node_id>                 ephemeral Member JSON {boot_id, endpoint, leaving}
    leader/candidate-<seq>            ephemeral sequential {"node_id": n, "boot_id": b}; the lowest is
                                      the leader, its sequence number + 1 the fencing token
    assignment                        the register (laminar_kafka.coordinator.state.ControlState JSON)
    vnode_load                        {vnode: partitions} written by any node (placement input)
    rounds/<round_id>                 {predecessor, target, digest, leader_token, target_owners,
                                      participants, deadline_ms}
    rounds/<round_id>/ready/<node>.<boot>   drain receipts (empty)
    rounds/<round_id>/decision        create-once {drain_id, outcome, manifest_epoch}
    epochs/<epoch>                    {epoch, assignment_version}
    epochs/<epoch>/acks/<node>.<boot> EpochAck JSON (chunked when large)
    epochs/<epoch>/rejected/<node>.<boot>.<digest>   create-once {"reason": ...}
    checkpoints/<epoch>               Manifest JSON (chunked when large): full (format 1), or the
                                      change from a full one (format 2, manifest_delta); epoch 0 is
                                      the pinned initial manifest (create-once under locks/pin)
    topics/<topic>                    create-once: the topic's Kafka topic id (UTF-8)
    node-ids/ids/<node_id>            ``node-id auto``: the claim of an id, {"identity": i, "host": h}
    node-ids/identities/<identity>    ``node-id auto``: the id of an identity, {"node_id": n}; created,
                                      moved and deleted with its claim, in one transaction

Names: epochs and rounds are 20 zero-padded digits (they sort like numbers); acks and drain receipts
are ``<node>.<boot>`` (one per boot, so a zombie never blocks its successor); rejection markers
``<node>.<boot>.<xxh3 hex of the ack's JSON>`` (keyed by content). A node identity
(:func:`is_node_identity`) is ``<kind>:<name>``, lower case: ``host:<host name>`` or
``dir:<token of the node's state file>``.

Chunks: a value larger than :data:`MANIFEST_CHUNK_BYTES` is a node whose data is a header
``{"chunked": true, "chunks": n, "size": s, "xxh3": h}`` with children ``chunk-0000`` .. holding
the bytes in order. While the chunks are written the node's data is :data:`PENDING` (empty).
:func:`join_chunks` checks the count, size and hash; a mismatch raises :class:`ChunkPending`.

This module does no I/O.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

import xxhash

from laminar_kafka.coordinator.codec import dumps, expect_int, expect_object, expect_str, loads
from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.engine.steps import (
    CreateDecision,
    Intent,
    MemberFence,
    OpenEpoch,
    RecordRejection,
    StartRound,
    WriteManifest,
)
from laminar_kafka.coordinator.errors import CodecError
from laminar_kafka.coordinator.state import RoundState
from laminar_kafka.coordinator.values import EpochAck
from laminar_kafka.coordinator.vnodes.registry import NodeId
from laminar_kafka.coordinator.vnodes.rounds import round_id

__all__ = [
    "MANIFEST_CHUNK_BYTES", "PENDING", "EPOCH_NAME_WIDTH", "CANDIDATE_PREFIX", "ASSIGNMENT", "VNODE_LOAD", "EPOCH_WANTED",
    "MEMBERS", "LEADER", "ROUNDS", "EPOCHS", "CHECKPOINTS", "TOPICS", "PIN_LOCK", "FOLDERS",
    "pipeline_path", "epoch_name", "ack_name", "parse_ack_name", "rejection_name", "parse_rejection_name",
    "member_path", "candidate_path", "round_path", "ready_folder", "ready_path", "decision_path",
    "epoch_path", "acks_folder", "ack_path", "rejected_folder", "rejection_path", "checkpoint_path",
    "topic_path", "fence_checks", "intent_records", "candidate_data", "parse_candidate", "rejection_data",
    "parse_rejection", "ChunkPending", "ChunkHeader", "chunk_name", "split_chunks", "parse_header",
    "join_chunks", "vnode_load_data", "parse_vnode_load", "epoch_wanted_data", "parse_epoch_wanted", "candidate_seq", "round_record",
    "NODE_IDS", "NODE_ID_CLAIMS", "NODE_IDENTITIES", "NodeIdClaim", "is_node_identity", "node_id_claim_path",
    "node_identity_path", "node_id_claim_data", "parse_node_id_claim", "node_identity_data", "parse_node_identity",
]

#: A value larger than this is stored as a header plus chunk children (ZooKeeper nodes stay < 1 MB).
MANIFEST_CHUNK_BYTES: int = 512 * 1024
#: The data of a chunked node whose chunks are still being written.
PENDING: bytes = b""
#: Width of epoch names in paths (sort like numbers).
EPOCH_NAME_WIDTH: int = 20
#: Election nodes are ``leader/candidate-<seq>``.
CANDIDATE_PREFIX: str = "candidate-"

ASSIGNMENT = "assignment"
VNODE_LOAD = "vnode_load"
#: the latest epoch after which a node asked for the next one (it holds rows no epoch covers; the
#: leader of a quiet pipeline then opens one at the ordinary interval)
EPOCH_WANTED = "epoch_wanted"
MEMBERS = "members"
LEADER = "leader"
ROUNDS = "rounds"
EPOCHS = "epochs"
CHECKPOINTS = "checkpoints"
TOPICS = "topics"
#: create-once pipeline-wide settings every node must share (e.g. a discovered record schema)
SETTINGS = "settings"
PIN_LOCK = "locks/pin"
#: ``node-id auto``: the claims of ids (``ids/<n>``) and their index by identity (``identities/<identity>``)
NODE_IDS = "node-ids"
NODE_ID_CLAIMS = f"{NODE_IDS}/ids"
NODE_IDENTITIES = f"{NODE_IDS}/identities"
#: The folders a coordinator creates on start.
FOLDERS: tuple[str, ...] = (MEMBERS, LEADER, ROUNDS, EPOCHS, CHECKPOINTS)

_ACK_NAME = re.compile(r"([1-9][0-9]*)\.([^./]+)")
_DIGEST = re.compile(r"[0-9a-f]{16}")
#: ``<kind>:<name>``: a path-safe znode name (no ``/``, never ``.`` or ``..``), at most 260 characters
_NODE_IDENTITY = re.compile(r"[a-z]{1,6}:[a-z0-9][a-z0-9._-]{0,252}")


def pipeline_path(config: CoordinatorConfig) -> str:
    """The absolute path of the pipeline's subtree: ``<root>/<pipeline>``."""
    return f"{config.root.rstrip('/')}/{config.pipeline}"


# ---- names ---------------------------------------------------------------------------------------


def epoch_name(epoch: int) -> str:
    """Path-safe, sortable name of an epoch (20 zero-padded digits)."""
    return f"{epoch:0{EPOCH_NAME_WIDTH}d}"


def ack_name(node_id: NodeId, boot_id: str) -> str:
    """Name of an ack or drain receipt: one per (node, boot), so a zombie can never block its successor."""
    return f"{node_id}.{boot_id}"


def parse_ack_name(name: str) -> tuple[NodeId, str]:
    """``(node, boot)`` of an ack or receipt name; CodecError when it is not ``<node>.<boot>``."""
    match = _ACK_NAME.fullmatch(name)
    if match is None:
        raise CodecError(f"malformed receipt name {name!r}: expected <node>.<boot>")
    return int(match.group(1)), match.group(2)


def rejection_name(ack: EpochAck) -> str:
    """Name of the rejection marker of ``ack``: ``<node>.<boot>.<xxh3_64 hex of its JSON>``.

    Keyed by content: a replacement ack with other content is classified afresh and, if rejected
    too, gets its own marker (boot ids contain no dot).
    """
    return f"{ack_name(ack.node_id, ack.boot_id)}.{xxhash.xxh3_64_hexdigest(ack.to_json())}"


def parse_rejection_name(name: str) -> tuple[NodeId, str, str]:
    """``(node, boot, digest)`` of a rejection marker name; CodecError when malformed."""
    receipt, _, digest = name.rpartition(".")
    if not _DIGEST.fullmatch(digest):
        raise CodecError(f"malformed rejection name {name!r}: expected <node>.<boot>.<16 hex digits>")
    node, boot = parse_ack_name(receipt)
    return node, boot, digest


# ---- paths (relative to the pipeline's subtree) -------------------------------------------------


def member_path(node_id: NodeId) -> str:
    return f"{MEMBERS}/{node_id}"


def candidate_path(candidate: str) -> str:
    """``candidate`` is the election node's name (``candidate-<seq>``)."""
    return f"{LEADER}/{candidate}"


def round_path(target_version: int) -> str:
    return f"{ROUNDS}/{round_id(target_version)}"


def ready_folder(target_version: int) -> str:
    return f"{round_path(target_version)}/ready"


def ready_path(target_version: int, node_id: NodeId, boot_id: str) -> str:
    return f"{ready_folder(target_version)}/{ack_name(node_id, boot_id)}"


def decision_path(target_version: int) -> str:
    return f"{round_path(target_version)}/decision"


def epoch_path(epoch: int) -> str:
    return f"{EPOCHS}/{epoch_name(epoch)}"


def acks_folder(epoch: int) -> str:
    return f"{epoch_path(epoch)}/acks"


def ack_path(epoch: int, node_id: NodeId, boot_id: str) -> str:
    return f"{acks_folder(epoch)}/{ack_name(node_id, boot_id)}"


def rejected_folder(epoch: int) -> str:
    return f"{epoch_path(epoch)}/rejected"


def rejection_path(epoch: int, name: str) -> str:
    return f"{rejected_folder(epoch)}/{name}"


def checkpoint_path(epoch: int) -> str:
    return f"{CHECKPOINTS}/{epoch_name(epoch)}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def setting_path(name: str) -> str:
    return f"{SETTINGS}/{name}"


def is_node_identity(identity: object) -> bool:
    """Whether ``identity`` is ``<kind>:<name>`` (lower-case letters; a name of lower-case letters,
    digits, ``.``, ``_`` and ``-`` starting with a letter or digit), usable as a znode name."""
    return isinstance(identity, str) and _NODE_IDENTITY.fullmatch(identity) is not None


def node_id_claim_path(node_id: NodeId) -> str:
    return f"{NODE_ID_CLAIMS}/{node_id}"


def node_identity_path(identity: str) -> str:
    """CodecError unless ``identity`` is a node identity (:func:`is_node_identity`)."""
    if not is_node_identity(identity):
        raise CodecError(f"malformed node identity {identity!r}: expected <kind>:<name>, lower case")
    return f"{NODE_IDENTITIES}/{identity}"


# ---- records ---------------------------------------------------------------------------------------


def fence_checks(fence: MemberFence) -> tuple[tuple[str, int], ...]:
    """The ``(path, version)`` checks that hold exactly while ``fence`` does."""
    return ((member_path(fence.node), fence.member_version), (candidate_path(fence.candidate), 0))


def intent_records(intent: Intent, manifest_data: bytes | None = None) -> tuple[tuple[str, bytes], ...]:
    """The nodes ``intent`` creates, in creation order (parents first), as ``(path, data)``.
    ``manifest_data``: a :class:`WriteManifest`'s stored bytes (default: its full encoding; a store
    may write it as a delta, :mod:`laminar_kafka.coordinator.manifest_delta`)."""
    if isinstance(intent, OpenEpoch):
        data = dumps({"epoch": intent.epoch, "assignment_version": intent.assignment_version})
        return ((epoch_path(intent.epoch), data), (acks_folder(intent.epoch), b""),
                (rejected_folder(intent.epoch), b""))
    if isinstance(intent, WriteManifest):
        data = intent.manifest.to_json() if manifest_data is None else manifest_data
        return ((checkpoint_path(intent.manifest.epoch), data),)
    if isinstance(intent, StartRound):
        return ((round_path(intent.round.drain_id.target_version), round_record(intent.round)),
                (ready_folder(intent.round.drain_id.target_version), b""))
    if isinstance(intent, CreateDecision):
        decision = intent.decision
        return ((decision_path(decision.drain_id.target_version), dumps(decision.to_dict())),)
    if isinstance(intent, RecordRejection):
        return ((rejection_path(intent.ack.epoch, rejection_name(intent.ack)), rejection_data(intent.reason)),)
    raise TypeError(f"unknown intent {intent!r}")


def round_record(r: RoundState) -> bytes:
    """The readers' record of a round (``rounds/<round_id>``)."""
    d = r.drain_id
    return dumps({
        "predecessor": d.predecessor_version, "target": d.target_version, "digest": d.digest,
        "leader_token": r.leader_token, "target_owners": list(r.target_owners),
        "participants": list(r.participants), "deadline_ms": r.deadline_ms,
    })


def candidate_data(node_id: NodeId, boot_id: str) -> bytes:
    """The data of an election candidate."""
    return json.dumps({"node_id": node_id, "boot_id": boot_id}).encode()


def parse_candidate(raw: bytes) -> tuple[NodeId, str]:
    """``(node, boot)`` of an election candidate's data; CodecError when malformed."""
    data = expect_object(loads(raw, "election candidate"), "election candidate", ("node_id", "boot_id"))
    return (expect_int(data["node_id"], "election candidate: node_id", minimum=1),
            expect_str(data["boot_id"], "election candidate: boot_id", nonempty=True))


def rejection_data(reason: str) -> bytes:
    return dumps({"reason": reason})


def parse_rejection(raw: bytes) -> str:
    """The reason recorded in a rejection marker; CodecError when malformed."""
    data = expect_object(loads(raw, "rejection marker"), "rejection marker", ("reason",))
    return expect_str(data["reason"], "rejection marker: reason")


@dataclass(frozen=True)
class NodeIdClaim:
    """Who claimed a node id with ``node-id auto``: the node's identity, and its host name (for people)."""

    identity: str
    host: str


def node_id_claim_data(claim: NodeIdClaim) -> bytes:
    """The data of ``node-ids/ids/<n>``; CodecError for a malformed identity."""
    node_identity_path(claim.identity)
    return dumps({"identity": claim.identity, "host": claim.host})


def parse_node_id_claim(node_id: NodeId, raw: bytes) -> NodeIdClaim:
    """Strict inverse of :func:`node_id_claim_data`; CodecError when malformed."""
    what = f"claim of node id {node_id}"
    data = expect_object(loads(raw, what), what, ("identity", "host"))
    identity = expect_str(data["identity"], f"{what}: identity")
    if not is_node_identity(identity):
        raise CodecError(f"{what}: identity = {identity!r} is not <kind>:<name>")
    return NodeIdClaim(identity, expect_str(data["host"], f"{what}: host"))


def node_identity_data(node_id: NodeId) -> bytes:
    """The data of ``node-ids/identities/<identity>``."""
    return dumps({"node_id": node_id})


def parse_node_identity(identity: str, raw: bytes) -> NodeId:
    """The node id an identity record holds; CodecError when malformed."""
    what = f"node id of identity {identity}"
    data = expect_object(loads(raw, what), what, ("node_id",))
    return expect_int(data["node_id"], f"{what}: node_id", minimum=1)


# ---- chunks -------------------------------------------------------------------------------------


class ChunkPending(CodecError):
    """A chunked value is being written (PENDING), or its chunks do not match its header (a chunk is
    missing: truncated, or being rewritten or collected; or the size or hash differ)."""


@dataclass(frozen=True)
class ChunkHeader:
    """The header of a chunked value: how many chunks, how many bytes in all, their xxh3_64."""

    chunks: int
    size: int
    xxh3: int

    def to_json(self) -> bytes:
        return json.dumps({"chunked": True, "chunks": self.chunks, "size": self.size, "xxh3": self.xxh3}).encode()


#: Headers are short; a longer node is a plain value (no need to parse it to tell).
_MAX_HEADER_BYTES = 256


def chunk_name(index: int) -> str:
    return f"chunk-{index:04d}"


def split_chunks(data: bytes, chunk_bytes: int = MANIFEST_CHUNK_BYTES) -> tuple[ChunkHeader, list[bytes]]:
    """``data`` cut into chunks of at most ``chunk_bytes``, and the header that describes them."""
    chunks = [data[i:i + chunk_bytes] for i in range(0, len(data), chunk_bytes)]
    return ChunkHeader(len(chunks), len(data), xxhash.xxh3_64_intdigest(data)), chunks


def parse_header(raw: bytes) -> ChunkHeader | None:
    """The header in a node's data, or None when the data is a plain value; CodecError for a
    malformed header (a wrong type, a missing or unknown key, a non-positive chunk count)."""
    if len(raw) > _MAX_HEADER_BYTES or not raw.startswith(b'{"chunked"'):
        return None
    data = expect_object(loads(raw, "chunk header"), "chunk header", ("chunked", "chunks", "size", "xxh3"))
    if data["chunked"] is not True:
        raise CodecError(f"chunk header: chunked = {data['chunked']!r} must be true")
    return ChunkHeader(
        expect_int(data["chunks"], "chunk header: chunks", minimum=1),
        expect_int(data["size"], "chunk header: size"),
        expect_int(data["xxh3"], "chunk header: xxh3"),
    )


def join_chunks(path: str, header: ChunkHeader, chunks: list[bytes | None]) -> bytes:
    """The value of a chunked node from its chunks in order (None: missing); ChunkPending unless
    every chunk is there and the bytes match the header's size and hash."""
    missing = [i for i, chunk in enumerate(chunks) if chunk is None]
    if len(chunks) != header.chunks or missing:
        raise ChunkPending(f"{path}: {len(missing) or header.chunks - len(chunks)} of {header.chunks} chunks missing")
    data = b"".join(c for c in chunks if c is not None)
    if len(data) != header.size:
        raise ChunkPending(f"{path}: chunks hold {len(data)} bytes, the header says {header.size}")
    if xxhash.xxh3_64_intdigest(data) != header.xxh3:
        raise ChunkPending(f"{path}: chunks do not match the header's xxh3")
    return data


def vnode_load_data(load: Mapping[int, int]) -> bytes:
    """The data of the ``vnode_load`` node: ``{"<vnode>": partitions}``."""
    return json.dumps({str(v): int(n) for v, n in sorted(load.items())}).encode()


def parse_vnode_load(raw: bytes) -> dict[int, int]:
    """Strict inverse of :func:`vnode_load_data`; CodecError when malformed."""
    data = loads(raw, "vnode load")
    if not isinstance(data, dict):
        raise CodecError("vnode load must be a JSON object")
    result: dict[int, int] = {}
    for vnode, count in data.items():
        if not vnode.isascii() or not vnode.isdigit() or str(int(vnode)) != vnode:
            raise CodecError(f"vnode load: key {vnode!r} is not a vnode number")
        result[int(vnode)] = expect_int(count, f"vnode load[{vnode}]")
    return result


def epoch_wanted_data(after_epoch: int) -> bytes:
    """The data of the ``epoch_wanted`` node: the decimal epoch the next one is asked after."""
    return str(expect_int(after_epoch, "epoch wanted")).encode()


def parse_epoch_wanted(raw: bytes) -> int:
    """Strict inverse of :func:`epoch_wanted_data`; CodecError when malformed."""
    text = raw.decode("ascii", errors="replace")
    if not text.isascii() or not text.isdigit() or str(int(text)) != text:
        raise CodecError(f"epoch wanted {raw[:40]!r} is not an epoch number")
    return int(text)


def candidate_seq(candidate: str) -> int:
    """The sequence number of an election candidate name (``candidate-<seq>``); its leader's fencing
    token is this + 1."""
    name = candidate.rsplit("/", 1)[-1]
    if not name.startswith(CANDIDATE_PREFIX) or not name[len(CANDIDATE_PREFIX):].isdigit():
        raise CodecError(f"malformed election candidate name {candidate!r}")
    return int(name[len(CANDIDATE_PREFIX):])
