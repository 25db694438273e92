"""``node-id auto`` in ZooKeeper: node ids claimed create-once under the pipeline's subtree, keyed by
the node's identity, so two nodes never get the same id, even racing, and a restarted node finds its
id again.

Layout (:mod:`laminar_kafka.coordinator.layout`): ``node-ids/ids/<n>`` is the claim of id ``n``
(``{"identity", "host"}``), ``node-ids/identities/<identity>`` its index (``{"node_id": n}``). A claim
and its index are created in one transaction, so an identity holds at most one id and an id belongs
to at most one identity. :func:`claim_node_id` gives, in this order:

- the identity's own claim, when it has one (:attr:`ClaimOutcome.KEPT`);
- ``wanted`` (a host name's ordinal), when given and no identity claims it (``CLAIMED``); claimed by
  another identity it is refused (:class:`NodeIdTaken`, nothing written), whether a live member runs
  as it or not: a claim without a live member may be a node starting this moment, or one that
  restarts in a minute, so only a person can say it is gone for good (the message names the claim to
  delete then);
- ``preferred`` (the id the node's state file recorded, claimed again after the subtree was deleted)
  when no identity claims it and no live member runs as it;
- else the smallest id no identity claims and no live member runs as (``CLAIMED``).

Two nodes racing for one id: one transaction creates the claim, the other fails and looks again (an
allocation takes the next id, a wanted id is refused); two processes of one identity racing: one
creates the index, the other then reads it and gets the same id (the coordinator refuses the second
member: ``ZooKeeperCoordinator._register``). Claims are never deleted here: an id once claimed stays
its identity's, so a restarted node always finds its own. An allocation avoids the members live when
it runs; a node started later with the same explicit ``--node-id`` is refused by the coordinator's
twin check.
"""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError, RuntimeInconsistency
from kazoo.handlers.threading import KazooTimeoutError

from laminar_kafka.coordinator import layout
from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.errors import CoordinatorError, CoordinatorUnavailable, NodeIdTaken
from laminar_kafka.coordinator.layout import NodeIdClaim
from laminar_kafka.coordinator.vnodes.registry import NodeId
from laminar_kafka.coordinator.zk.auth import ensure_subtree, open_client

logger = logging.getLogger(__name__)

__all__ = ["ClaimOutcome", "ClaimedNodeId", "claim_node_id", "claim_in_pipeline"]

#: looks again after a lost race at most this often (each lost race means another node claimed an id)
MAX_ATTEMPTS = 64
#: transaction failures that mean "the claims changed under this one: look again" (ZooKeeper answers the
#: operations before the failing one with RolledBack, those after it with RuntimeInconsistency)
_RACE_FAILURES = (NodeExistsError, NoNodeError, BadVersionError, RolledBackError, RuntimeInconsistency)


class ClaimOutcome(enum.Enum):
    """How :func:`claim_node_id` came by the id."""

    KEPT = "kept"  # the identity's own claim, from an earlier start
    CLAIMED = "claimed"  # a new claim: the wanted id, the preferred one or the smallest free one


@dataclass(frozen=True)
class ClaimedNodeId:
    """The id an identity holds, and how it came by it."""

    node_id: NodeId
    outcome: ClaimOutcome


def claim_in_pipeline(
    config: CoordinatorConfig, claim: NodeIdClaim, *, wanted: NodeId | None = None,
    preferred: NodeId | None = None, timeout: float = 10.0,
) -> ClaimedNodeId:
    """:func:`claim_node_id` in the pipeline of ``config`` on a session of its own (with the
    credentials' ACL), closed before returning. Raises :class:`CoordinatorUnavailable` when no
    session opens within ``timeout``, :class:`~laminar_kafka.coordinator.errors.AccessDeniedError`
    when the subtree refuses the credentials, and what :func:`claim_node_id` raises."""
    client = open_client(config.hosts, timeout, config.credentials)
    try:
        try:
            client.start(timeout=timeout)
        except KazooTimeoutError as exc:
            raise CoordinatorUnavailable(f"ZooKeeper {config.hosts} unreachable in {timeout:g}s", cause=exc) from exc
        base = layout.pipeline_path(config)
        ensure_subtree(client, base, config.credentials)
        return claim_node_id(client, base, claim, wanted=wanted, preferred=preferred)
    finally:
        client.stop()
        client.close()


def claim_node_id(
    client: KazooClient, base: str, claim: NodeIdClaim, *, wanted: NodeId | None = None,
    preferred: NodeId | None = None,
) -> ClaimedNodeId:
    """The id of ``claim.identity`` in the pipeline subtree ``base`` (see the module docstring);
    ``client`` is started. Raises :class:`NodeIdTaken` when another identity claims ``wanted``,
    :class:`CoordinatorError` when the identity claims another id than ``wanted`` or the claims keep
    changing under it (more than :data:`MAX_ATTEMPTS` lost races), CodecError for a malformed record,
    kazoo's errors for ZooKeeper's (a lost connection, a refused ACL)."""
    if (wanted is not None and wanted < 1) or (preferred is not None and preferred < 1):
        raise CoordinatorError(f"node ids are >= 1: wanted {wanted}, preferred {preferred}")
    claims = _Claims(client, base)
    claims.ensure_folders()
    for _ in range(MAX_ATTEMPTS):
        own = claims.read_index(claim.identity)
        if own is not None:
            kept = _follow_own(claims, claim, own, wanted)
            if kept is not None:
                return kept
            continue
        node_id = wanted if wanted is not None else claims.free_id(preferred)
        held = claims.read_claim(node_id)
        if held is None:
            if claims.create(node_id, claim):
                return ClaimedNodeId(node_id, ClaimOutcome.CLAIMED)
            logger.debug("node id %d: another node claimed it first, looking again", node_id)
            continue
        other, _ = held
        if other.identity == claim.identity:  # a claim whose index is missing (written by hand): index it
            claims.create_index(claim.identity, node_id)
            continue
        if wanted is None:
            continue  # claimed since free_id looked: look again
        raise claims.taken(node_id, other)
    raise CoordinatorError(f"no node id claimed for {claim.identity} after {MAX_ATTEMPTS} attempts: "
                           "the claims kept changing under it")


def _follow_own(claims: _Claims, claim: NodeIdClaim, own: tuple[NodeId, int], wanted: NodeId | None
                ) -> ClaimedNodeId | None:
    """The identity's own claim (index ``own`` = (id, version)) when it stands; None after dropping
    an index whose claim is gone or another's (deleted by hand: the caller claims afresh)."""
    node_id, index_version = own
    held = claims.read_claim(node_id)
    if held is None or held[0].identity != claim.identity:
        claims.delete_index(claim.identity, index_version)
        return None
    if wanted is not None and wanted != node_id:
        raise CoordinatorError(
            f"{claim.identity} claims node id {node_id}, not {wanted}: delete {claims.claim_paths(node_id, claim)} "
            "to let it claim anew")
    if held[0].host != claim.host:  # a node with a state file on another host: the claim says where now
        claims.update_host(node_id, held[1], claim)
    return ClaimedNodeId(node_id, ClaimOutcome.KEPT)


class _Claims:
    """Reads and transactions on ``node-ids/`` of the subtree ``base`` (see the module docstring)."""

    def __init__(self, client: KazooClient, base: str) -> None:
        self._client = client
        self._base = base

    def _path(self, relative: str) -> str:
        return f"{self._base}/{relative}"

    def ensure_folders(self) -> None:
        for folder in (layout.NODE_ID_CLAIMS, layout.NODE_IDENTITIES):
            self._client.ensure_path(self._path(folder))

    def read_index(self, identity: str) -> tuple[NodeId, int] | None:
        """(id, version) of the identity's index, None without one."""
        try:
            raw, stat = self._client.get(self._path(layout.node_identity_path(identity)))
        except NoNodeError:
            return None
        return layout.parse_node_identity(identity, raw), stat.version

    def read_claim(self, node_id: NodeId) -> tuple[NodeIdClaim, int] | None:
        """(claim, version) of ``node_id``, None when unclaimed."""
        try:
            raw, stat = self._client.get(self._path(layout.node_id_claim_path(node_id)))
        except NoNodeError:
            return None
        return layout.parse_node_id_claim(node_id, raw), stat.version

    def is_live(self, node_id: NodeId) -> bool:
        """Whether a member runs as ``node_id`` now (its ephemeral member entry exists)."""
        return self._client.exists(self._path(layout.member_path(node_id))) is not None

    def free_id(self, preferred: NodeId | None) -> NodeId:
        """``preferred`` when no identity claims it and no live member runs as it, else the smallest
        such id."""
        taken = self._numbers(layout.NODE_ID_CLAIMS) | self._numbers(layout.MEMBERS)
        if preferred is not None and preferred not in taken:
            return preferred
        node_id = 1
        while node_id in taken:
            node_id += 1
        return node_id

    def _numbers(self, folder: str) -> set[int]:
        try:
            names = self._client.get_children(self._path(folder))
        except NoNodeError:
            return set()
        return {int(name) for name in names if name.isascii() and name.isdigit()}

    def create(self, node_id: NodeId, claim: NodeIdClaim) -> bool:
        """Create the claim of ``node_id`` and the identity's index together; False when either exists."""
        txn = self._client.transaction()
        txn.create(self._path(layout.node_id_claim_path(node_id)), layout.node_id_claim_data(claim))
        txn.create(self._path(layout.node_identity_path(claim.identity)), layout.node_identity_data(node_id))
        return self._committed(txn)

    def create_index(self, identity: str, node_id: NodeId) -> None:
        try:
            self._client.create(self._path(layout.node_identity_path(identity)), layout.node_identity_data(node_id))
        except NodeExistsError:
            pass

    def delete_index(self, identity: str, version: int) -> None:
        try:
            self._client.delete(self._path(layout.node_identity_path(identity)), version=version)
        except (NoNodeError, BadVersionError):
            pass

    def update_host(self, node_id: NodeId, version: int, claim: NodeIdClaim) -> None:
        try:
            self._client.set(self._path(layout.node_id_claim_path(node_id)), layout.node_id_claim_data(claim),
                             version=version)
        except (NoNodeError, BadVersionError):
            pass  # changed meanwhile: the next start looks again

    def taken(self, node_id: NodeId, other: NodeIdClaim) -> NodeIdTaken:
        """The refusal of ``node_id``, claimed by ``other``: what runs as it, and what a person can do."""
        holder = f"{other.identity} on host {other.host or 'unknown'}"
        if self.is_live(node_id):
            return NodeIdTaken(f"node id {node_id} is held by a live node of another identity ({holder}): stop that node")
        return NodeIdTaken(f"node id {node_id} is claimed by another identity ({holder}), which no live node runs as "
                           f"now: if that node is gone for good, delete {self.claim_paths(node_id, other)}")

    def claim_paths(self, node_id: NodeId, claim: NodeIdClaim) -> str:
        """The two znodes of a claim, for a person to delete."""
        return (f"{self._path(layout.node_id_claim_path(node_id))} and "
                f"{self._path(layout.node_identity_path(claim.identity))}")

    @staticmethod
    def _committed(txn: Any) -> bool:
        """Commit ``txn``: True when it applied, False when it lost a race; other failures raise."""
        failures = [result for result in txn.commit() if isinstance(result, Exception)]
        for failure in failures:
            if not isinstance(failure, _RACE_FAILURES):
                raise failure
        return not failures
