"""``node-id = auto``: a node's id without per-node configuration. The rules, pure; the resolution
with its I/O (the state file, ZooKeeper) is :mod:`laminar_kafka.cluster.auto_node_id`.

The rule, first match wins:

1. **Embedded** (no ``zk``): id 1. An embedded pipeline has exactly one node.
2. **Ordinal**: the host name has an ordinal ``n`` (:func:`host_ordinal`): id ``n + 1``, claimed in
   ZooKeeper for the host name. Held by a live node of another identity: refused in one line.
3. **Allocated**: otherwise an id is claimed create-once in ZooKeeper
   (:mod:`laminar_kafka.coordinator.zk.node_ids`) for the node's identity: its state file's token
   when ``state-dir`` is set (``<state-dir>/node-id-<pipeline>.json``, which also records the id),
   else its host name. The smallest id no identity claims and no live member runs as; the same
   identity gets the same id at every start.

The ordinal: the host name's first DNS label, in lower case, is ``<name>-<n>``, where ``<n>`` is 1 to
4 decimal digits without a leading zero (``0`` itself is one) and ``<name>`` is not empty and does not
end in a label of digits only. So:

- ``lake-0``, ``lake-1``, ``lake-2`` (the pods of a Kubernetes StatefulSet ``lake``: ordinals from 0,
  a pod keeps its name when it restarts or moves) have ordinals 0, 1, 2: ids 1, 2, 3;
- ``proj-node-1`` (a ``docker compose --scale`` replica's name, when it is also the host name: a
  container's host name is its container id unless ``hostname:`` is set) has ordinal 1: id 2;
- no ordinal: ``vm``, ``worker7``, ``node-01`` (a leading zero), ``ip-10-0-0-12`` (an EC2 host name is
  an address: two hosts in two subnets end alike), ``web-5d8c7b9f4d-24567`` (a Deployment's pod: five
  random characters, sometimes all digits; a replaced pod gets a new name, so it has no stable
  ordinal).

Why ``n + 1``: node ids are integers >= 1 (0 means unassigned) and StatefulSet ordinals start at 0.
One rule for every name is injective (two ordinals never give one id) and stable (a name gives the
same id at every start). Taking ``n`` as it is when >= 1 and allocating for 0 would hand ``lake-0``
an id that a later ``lake-<id>`` needs; a compose project whose replicas count from 1 leaves id 1
unused, which costs nothing.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from laminar_kafka.cluster.config_file import AUTO
from laminar_kafka.coordinator.codec import dumps, expect_int, expect_object, expect_str, loads
from laminar_kafka.coordinator.errors import CodecError
from laminar_kafka.coordinator.layout import is_node_identity
from laminar_kafka.coordinator.vnodes.registry import NodeId
from laminar_kafka.errors import ConfigurationError

__all__ = [
    "AUTO", "EMBEDDED_NODE_ID", "NodeIdChoice", "NodeIdPlan", "NodeIdScheme", "StateFile", "host_identity",
    "host_label", "host_ordinal", "ordinal_node_id", "plan_node_id", "state_file_name", "token_identity",
]

#: the id of an embedded pipeline's one node
EMBEDDED_NODE_ID: NodeId = 1
#: the ordinal's digits: 1 to 4, without a leading zero
_ORDINAL = re.compile(r"0|[1-9][0-9]{0,3}")
_DIGITS = re.compile(r"[0-9]+")
_HOST = re.compile(r"[a-z0-9][a-z0-9._-]{0,252}")
_TOKEN = re.compile(r"[0-9a-f]{32}")


class NodeIdScheme(enum.Enum):
    """Which rule gave the id."""

    EMBEDDED = "embedded"
    ORDINAL = "ordinal"
    ALLOCATED = "allocated"


def host_label(host: str) -> str:
    """The first DNS label of ``host``, in lower case (``Lake-2.lake.ns.svc`` -> ``lake-2``)."""
    return host.strip().lower().split(".", 1)[0]


def host_ordinal(host: str) -> int | None:
    """The ordinal of ``host`` (see the module docstring), None when it has none."""
    label = host_label(host)
    name, dash, digits = label.rpartition("-")
    if not dash or not name or name.endswith("-"):
        return None
    if not _ORDINAL.fullmatch(digits):
        return None
    if _DIGITS.fullmatch(name.rpartition("-")[2]):  # ip-10-0-0-12: the label before is an address's
        return None
    return int(digits)


def ordinal_node_id(ordinal: int) -> NodeId:
    """The node id of a host name's ordinal: ``ordinal + 1`` (ids are >= 1, ordinals start at 0)."""
    if ordinal < 0:
        raise ValueError(f"an ordinal is >= 0, got {ordinal}")
    return ordinal + 1


def host_identity(host: str) -> str:
    """The identity of a node known by its host name: ``host:<host name in lower case>``.
    :class:`ConfigurationError` when the name cannot be one (empty, or characters a host name has not)."""
    name = host.strip().lower().rstrip(".")
    if not _HOST.fullmatch(name):
        raise ConfigurationError(f"node-id auto: the host name {host!r} cannot identify this node (letters, digits, "
                          "'.', '_' and '-' only); set state-dir (its file identifies the node) or an explicit node-id")
    return f"host:{name}"


def token_identity(token: str) -> str:
    """The identity of a node known by its state file's token (32 hex digits): ``dir:<token>``."""
    if not _TOKEN.fullmatch(token):
        raise ConfigurationError(f"node-id auto: state file token {token!r} is not 32 hexadecimal digits")
    return f"dir:{token}"


@dataclass(frozen=True)
class NodeIdPlan:
    """What the host name and the mode decide: a fixed id (embedded, ordinal) or an allocation."""

    scheme: NodeIdScheme
    host: str
    #: the id (EMBEDDED, ORDINAL); None: ZooKeeper allocates one (ALLOCATED)
    node_id: NodeId | None = None
    ordinal: int | None = None

    def describe(self) -> str:
        """Why this scheme, for the log line and the errors."""
        if self.scheme is NodeIdScheme.EMBEDDED:
            return "embedded mode has one node"
        if self.scheme is NodeIdScheme.ORDINAL:
            return f"host name {self.host} has ordinal {self.ordinal}: id = ordinal + 1"
        return f"host name {self.host} has no ordinal"


def plan_node_id(host: str, *, embedded: bool) -> NodeIdPlan:
    """Rules 1 and 2 of the module docstring, or rule 3's plan (an allocation). Pure."""
    if embedded:
        return NodeIdPlan(NodeIdScheme.EMBEDDED, host, EMBEDDED_NODE_ID)
    ordinal = host_ordinal(host)
    if ordinal is not None:
        return NodeIdPlan(NodeIdScheme.ORDINAL, host, ordinal_node_id(ordinal), ordinal)
    return NodeIdPlan(NodeIdScheme.ALLOCATED, host)


@dataclass(frozen=True)
class NodeIdChoice:
    """The id ``node-id auto`` chose, and why (one sentence: the INFO line, the twin refusal)."""

    node_id: NodeId
    scheme: NodeIdScheme
    reason: str
    identity: str = ""

    def log_line(self) -> str:
        return f"node id {self.node_id} (node-id auto: {self.reason})"

    def origin(self) -> str:
        """How the id was chosen, for the coordinator's refusal of a twin."""
        hint = ""
        if self.scheme is NodeIdScheme.ALLOCATED and self.identity.startswith("host:"):
            hint = "; two nodes on one host need a state-dir each"
        return f"chosen by --node-id auto: {self.reason}{hint}"


def state_file_name(pipeline: str) -> str:
    """The state file of a pipeline's node in its state-dir."""
    return f"node-id-{pipeline}.json"


@dataclass(frozen=True)
class StateFile:
    """``<state-dir>/node-id-<pipeline>.json``: the node's identity (written before it claims an id,
    so a node that dies in between claims the same one again) and the id it claimed (None: not yet).

    JSON ``{"identity": "dir:<token>", "pipeline": p, "node_id": n | null}``, decoded strictly."""

    identity: str
    pipeline: str
    node_id: NodeId | None = None

    def to_json(self) -> bytes:
        return dumps({"identity": self.identity, "pipeline": self.pipeline, "node_id": self.node_id}) + b"\n"

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> StateFile:
        """:class:`ConfigurationError` naming ``where`` when ``raw`` is not such a file."""
        try:
            data = expect_object(loads(raw, where), where, ("identity", "pipeline", "node_id"))
            identity = expect_str(data["identity"], f"{where}: identity")
            if not identity.startswith("dir:") or not is_node_identity(identity):
                raise CodecError(f"{where}: identity = {identity!r} is not dir:<token>")
            node_id = None if data["node_id"] is None else expect_int(data["node_id"], f"{where}: node_id", minimum=1)
            return cls(identity, expect_str(data["pipeline"], f"{where}: pipeline"), node_id)
        except CodecError as exc:
            raise ConfigurationError(f"node-id auto: {exc}; delete the file to let the node claim a new id") from None
