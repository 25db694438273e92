"""The LaminarDB source-connector protocol, ported to Python/asyncio.

Value types and the abstract :class:`SourceConnector`. Deadlines passed to the drain hooks are
``float`` **absolute** values of :func:`time.monotonic` (the analogue of ``tokio::time::Instant``):
an implementation computes the time left as ``deadline - time.monotonic()`` and must not continue
provider work after it.

The drain/vnode hooks fail closed by default: a connector that does not implement exact
vnode-scoped ownership raises :class:`~laminar_kafka.connector.errors.ConfigurationError` from them, so it can
never be placed as a splittable source while every node reads all input.
"""
from __future__ import annotations

import abc
import asyncio
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

import pyarrow as pa

from laminar_kafka.connector.checkpoint import SourceCheckpoint
from laminar_kafka.connector.tasks import ConnectorTaskTracker
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId
from laminar_kafka.errors import ConfigurationError

if TYPE_CHECKING:
    from laminar_kafka.coordinator.vnodes.registry import VnodeRegistry

__all__ = [
    "CheckpointAttempt",
    "ConnectorCancellationPolicy",
    "ConnectorConfig",
    "ConnectorTaskTracker",
    "DeliveryGuarantee",
    "SourceBatch",
    "SourceCheckpoint",
    "SourceCheckpointUnavailablePolicy",
    "SourceConnector",
    "SourceContract",
    "SourceDrainOutcome",
    "SourceDrainRequest",
    "SourceDrainResolution",
    "SourceOrdering",
    "SourcePosition",
    "SourceStart",
    "SourceTopology",
]


class DeliveryGuarantee(enum.Enum):
    """Pipeline-wide delivery guarantee; the source uses it for fail-closed cursor policy."""

    BEST_EFFORT = "best-effort"
    AT_LEAST_ONCE = "at-least-once"
    EXACTLY_ONCE = "exactly-once"

    @property
    def is_guaranteed(self) -> bool:
        """True for at-least-once and exactly-once: no silent skip, no silent reset."""
        return self is not DeliveryGuarantee.BEST_EFFORT


class SourceCheckpointUnavailablePolicy(enum.Enum):
    """What the runtime does while ``try_checkpoint()`` returns ``None`` (a retained barrier)."""

    #: The runtime must not call ``poll_batch`` while ``try_checkpoint()`` returns ``None``: intake
    #: is held until control-plane reconciliation makes the cursor available again.
    HOLD_INTAKE = "hold-intake"
    #: The runtime may poll at most one batch before retrying the retained barrier. The source binds
    #: every batch to its exact cursor and stops it at the first completed replay-unit boundary.
    POLL_TO_REPLAY_BOUNDARY = "poll-to-replay-boundary"


class ConnectorCancellationPolicy(enum.Enum):
    """How the runtime may treat a lifecycle coroutine (``poll_batch``, ``finish_drain``, ...)
    cancelled at a deadline."""

    #: After a cancelled lifecycle coroutine the runtime must close this connector, await its
    #: :meth:`SourceConnector.terminal_task_tracker`, and build a new generation from the last
    #: durable checkpoint; the cancelled connector is never called again.
    RETIRE_CONNECTOR = "retire-connector"
    #: Cancelling any lifecycle coroutine preserves replay of every record not yet returned, so the
    #: runtime may keep using the same connector after a cancellation.
    CANCEL_SAFE = "cancel-safe"


class SourceTopology(enum.Enum):
    """Placement semantics of a source."""

    #: Input splits into independent units (partitions) that can be owned by different nodes.
    SPLITTABLE = "splittable"
    #: Exactly one instance may read the input.
    SINGLETON = "singleton"
    #: Every node reads its own local input.
    NODE_LOCAL = "node-local"


class SourceOrdering(enum.Enum):
    UNORDERED = "unordered"
    PER_SPLIT = "per-split"
    TOTAL = "total"


@dataclass(frozen=True)
class SourceContract:
    """Recovery and placement semantics of a source for one exact configuration."""

    replayable: bool
    topology: SourceTopology
    append_only: bool
    ordering: SourceOrdering


@dataclass(frozen=True)
class CheckpointAttempt:
    """The durable engine checkpoint attempt that owns a connector cursor.

    Canonical iff ``epoch == checkpoint_id`` and both are nonzero.
    """

    epoch: int
    checkpoint_id: int

    def is_canonical(self) -> bool:
        return self.epoch == self.checkpoint_id and self.epoch > 0


@dataclass(frozen=True)
class ConnectorConfig:
    """Fully resolved connector configuration: the connector type and its string properties."""

    connector_type: str
    properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "properties", MappingProxyType(dict(self.properties)))

    def __hash__(self) -> int:
        return hash((self.connector_type, tuple(sorted(self.properties.items()))))


class SourcePosition:
    """Startup position: :class:`SourcePosition.Initial` or :class:`SourcePosition.Resume`."""

    Initial: type[InitialPosition]
    Resume: type[ResumePosition]


@dataclass(frozen=True)
class InitialPosition(SourcePosition):
    """Start from the connector's configured deterministic initial position."""


@dataclass(frozen=True)
class ResumePosition(SourcePosition):
    """Resume from an exact durable engine checkpoint: the attempt and the cursor it captured."""

    attempt: CheckpointAttempt
    checkpoint: SourceCheckpoint


SourcePosition.Initial = InitialPosition
SourcePosition.Resume = ResumePosition


@dataclass(frozen=True)
class SourceStart:
    """A complete startup request, validated before any connector I/O.

    Raises :class:`ConfigurationError` when a resume attempt is not canonical.
    """

    config: ConnectorConfig
    position: SourcePosition
    delivery: DeliveryGuarantee

    def __post_init__(self) -> None:
        if not isinstance(self.position, (InitialPosition, ResumePosition)):
            raise ConfigurationError(f"unknown source position {self.position!r}")
        if isinstance(self.position, ResumePosition) and not self.position.attempt.is_canonical():
            raise ConfigurationError("source resume must use one nonzero canonical checkpoint ID")
        if not isinstance(self.delivery, DeliveryGuarantee):
            raise ConfigurationError(f"unknown delivery guarantee {self.delivery!r}")

    def into_parts(self) -> tuple[ConnectorConfig, SourcePosition, DeliveryGuarantee]:
        return self.config, self.position, self.delivery


@dataclass(frozen=True)
class SourceBatch:
    """Arrow rows plus the exact cursor after the batch's last row.

    ``rejected``: the records this poll consumed but could not decode, skipped by the bad-record
    policy (``None`` when there are none). The cursor is past them too, so a sink that keeps
    exactly once must write them with ``records`` (the node writes them to ``<output>/_rejected/``).
    Columns: the connector's own (Kafka's: ``laminar_kafka.kafka_source.decode.rejected.REJECTED_SCHEMA``).
    ``records`` may then have no row.
    """

    records: pa.RecordBatch
    checkpoint: SourceCheckpoint
    rejected: pa.RecordBatch | None = None

    @property
    def num_rows(self) -> int:
        return int(self.records.num_rows)


@dataclass(frozen=True)
class SourceDrainRequest:
    """The exact cluster transition for which a source must stop advancing input.

    Raises :class:`ConfigurationError` unless the round identity is canonical.
    """

    round: AssignmentDrainId

    def __post_init__(self) -> None:
        if not self.round.is_canonical():
            raise ConfigurationError("source drain round is not canonical")


class SourceDrainOutcome(enum.Enum):
    #: The target assignment committed; the source adopts its target ownership.
    COMMIT = "commit"
    #: The transition aborted; the source resumes from the predecessor cut.
    ABORT = "abort"


@dataclass(frozen=True)
class SourceDrainResolution:
    """The terminal resolution of one exact drain round."""

    round: AssignmentDrainId
    outcome: SourceDrainOutcome


class SourceConnector(abc.ABC):
    """A source connector: reads an external system into Arrow batches with exact cursors.

    Lifecycle: :meth:`start` (install the initial or recovered cursor and open the reader as one
    step) -> :meth:`poll_batch` in a loop, :meth:`checkpoint` between polls -> :meth:`close`.
    """

    # -- lifecycle ------------------------------------------------------------------------------

    def cancellation_policy(self) -> ConnectorCancellationPolicy:
        """What the runtime may do after cancelling a lifecycle coroutine at a deadline; stable.

        Default (conservative): ``RETIRE_CONNECTOR``: the runtime closes this generation, awaits
        :meth:`terminal_task_tracker` and builds a new one. ``CANCEL_SAFE`` lets the runtime reuse
        the connector after a cancellation.
        """
        return ConnectorCancellationPolicy.RETIRE_CONNECTOR

    def terminal_task_tracker(self) -> ConnectorTaskTracker | None:
        """Tracker of every thread this connector starts that may outlive this value, or ``None``
        if it starts none. The runtime awaits :meth:`ConnectorTaskTracker.wait` after
        :meth:`close` before it starts the next generation."""
        return None

    @abc.abstractmethod
    async def start(self, request: SourceStart) -> None:
        """Open the source and install its initial or resumed position as one transition.

        Post: the position is installed before any record can be emitted; no externally active
        consumer exists if this raises.
        """

    @abc.abstractmethod
    async def poll_batch(self, max_records: int) -> SourceBatch | None:
        """The next batch, or ``None`` when nothing is ready (the runtime retries later).

        ``max_records`` is the batching target; a source may exceed it only for an atomic replay
        unit that cannot be split, under independent hard record and byte limits. Must never block
        the event loop. A ``CANCEL_SAFE`` source must not advance any checkpoint-visible position
        across an ``await`` unless dropping the coroutine there preserves replay.
        """

    async def discover_schema(self, properties: Mapping[str, str]) -> None:
        """Resolve the schema from connector and format properties before planning.

        Network I/O must be bounded by a timeout; failures raise a ``ConnectorError``.
        """
        return None

    @abc.abstractmethod
    def schema(self) -> pa.Schema:
        """The Arrow schema of every batch this source produces."""

    @abc.abstractmethod
    def checkpoint(self) -> SourceCheckpoint:
        """A cursor from which a restart resumes exactly after the last emitted row."""

    def try_checkpoint(self) -> SourceCheckpoint | None:
        """Atomically capture the cursor; ``None`` while control-plane state is not reconciled.

        Raises a ``ConnectorError`` when no valid cursor exists for the current ownership state.
        """
        return self.checkpoint()

    def checkpoint_unavailable_policy(self) -> SourceCheckpointUnavailablePolicy:
        """How the runtime proceeds while :meth:`try_checkpoint` returns ``None``; stable after
        :meth:`start`.

        Default ``HOLD_INTAKE``: the runtime calls no :meth:`poll_batch` until a cursor is available
        again. ``POLL_TO_REPLAY_BOUNDARY``: the runtime may poll at most one batch before retrying
        the retained barrier.
        """
        return SourceCheckpointUnavailablePolicy.HOLD_INTAKE

    def checkpoint_ready(self) -> bool:
        """Whether the data-plane cursor is reconciled with the published ownership.

        While False the runtime neither polls nor admits checkpoint barriers. Raises when lost or
        invalid ownership state cannot be retried safely.
        """
        return True

    def drive_control_plane(self) -> None:
        """Advance connector-side reconciliation without blocking; called even while fenced.

        Called on every turn of the runtime. A connector whose :meth:`data_ready_notify` gives an
        event must also set it when background work this method observes finishes (a reader's
        assignment change, for one): a settled runtime waits for that event, or for up to
        half a second, between two turns."""
        return None

    # -- drain and ownership (fail closed unless implemented) -----------------------------------
    #
    # A round (``laminar_kafka.coordinator.vnodes.rounds.AssignmentDrainId``) moves the published assignment from version
    # v to v + 1. The runtime calls: set_vnode_assignment (once, before start) -> drive_control_plane
    # / checkpoint_ready every turn -> acquisition_needed / acquire_partitions when the published
    # version gives this node partitions without a round -> begin_drain, poll_drain_ready,
    # finish_drain for each round this node takes part in; add_partitions when the topology grows.

    def set_vnode_assignment(
        self, source_identity: str, registry: VnodeRegistry, self_id: int
    ) -> None:
        """Read exactly the partitions whose vnode ``self_id`` owns in ``registry`` from now on.

        A published owner map that leaves a vnode routing one of this source's partitions
        unassigned while other vnodes have owners is invalid (the coordinator assigns every vnode
        or none) and is rejected with a ``ConnectorError``. Fails closed (ConfigurationError)
        unless the connector implements exact vnode-scoped ownership.
        """
        raise ConfigurationError(
            "source advertises splittable placement but does not implement vnode assignment"
        )

    def acquisition_needed(self) -> tuple[int, frozenset[TopicPartitionId]] | None:
        """``(published version, partitions)`` while reconciling with the published version needs
        explicit start cursors (:meth:`acquire_partitions`) for these partitions, else ``None``.

        Never blocks and never raises. Default ``None``: a connector without vnode ownership never
        waits for cursors (its :meth:`acquire_partitions` fails closed).
        """
        return None

    def acquire_partitions(self, cursors: Mapping[str, int] | SourceCheckpoint, version: int) -> None:
        """Offer explicit start cursors for partitions this node gains without a round at ``version``.

        ``cursors`` maps ``"topic:partition"`` to the next offset to read (normally the cursors of
        the last durable manifest; a partition it lacks starts at its first offset). Applied by
        :meth:`drive_control_plane` when reconciling to exactly ``version``. Never blocks.
        Fails closed (ConfigurationError) unless the connector implements vnode ownership.
        """
        raise ConfigurationError("this source connector cannot acquire partitions at explicit cursors")

    def begin_drain(self, request: SourceDrainRequest, deadline: float) -> None:
        """Stop advancing the input that changes owner in ``request.round``, without blocking.

        ``deadline`` is an absolute :func:`time.monotonic` value. Readiness is observed through
        :meth:`poll_drain_ready`. A ``DrainError`` refuses the round for now (nothing changed; the
        runtime may retry); a ``FatalError`` retires the generation.
        """
        raise ConfigurationError("assignment-scoped source does not implement provider drain")

    def poll_drain_ready(self, round: AssignmentDrainId) -> bool:
        """Whether every record fetched before the drain boundary of ``round`` has been emitted
        (then the cut is fixed and in :meth:`checkpoint`). Never blocks."""
        raise ConfigurationError(
            "assignment-scoped source does not expose provider drain readiness"
        )

    async def finish_drain(
        self,
        resolution: SourceDrainResolution,
        deadline: float,
        handoff_cursors: Mapping[str, int] | SourceCheckpoint | None = None,
    ) -> None:
        """Resolve a drain: Commit adopts the target ownership, Abort rewinds to the cut.

        Commit: partitions gained under the target start at ``handoff_cursors`` (the cursors of
        the durable manifest holding the cut, ``"topic:partition" -> next offset``; never the
        broker's group offsets); without them the gained partitions wait for
        :meth:`acquire_partitions`. Blocking client work is bounded by ``deadline`` (absolute
        :func:`time.monotonic`); a resolution that timed out never acts later. Idempotent.
        """
        raise ConfigurationError(
            "assignment-scoped source does not implement provider drain resolution"
        )

    def add_partitions(self, partitions: Iterable[TopicPartitionId]) -> None:
        """The input's topology grew: ``partitions`` (``(topic, partition)``) exist now.

        A source that follows topology changes reads each new partition it owns from its first
        offset (or, in vnode mode, from explicit cursors offered for the published version). Never
        blocks; idempotent. Fails closed: a connector that cannot follow them raises, so a new
        partition is never silently left unread.
        """
        raise ConfigurationError("this source connector cannot follow topology changes (add_partitions)")

    # -- misc -----------------------------------------------------------------------------------

    @abc.abstractmethod
    async def close(self) -> None:
        """Release every resource; bounded in time."""

    def data_ready_notify(self) -> asyncio.Event | None:
        """An event set when data may be ready, or ``None`` for timer-driven polling.

        The runtime awaits it, then calls :meth:`poll_batch`; the source clears it when it finds
        nothing ready. Set it too when :meth:`drive_control_plane` has progress to observe: once
        settled (no round, epoch or reconciliation in flight) the runtime turns only when woken,
        or every half second; ``None`` keeps it polling every 50 ms.
        """
        return None

    @abc.abstractmethod
    def contract(self, config: ConnectorConfig) -> SourceContract:
        """Recovery and placement semantics for this exact configuration."""

    def recovery_identity_options(self, config: ConnectorConfig) -> dict[str, str] | None:
        """Deterministic, I/O-free semantic identity options (or ``None`` for the runtime's
        sanitised-property fallback). Endpoints and credentials may be omitted only when the
        checkpoint binds the exact external object."""
        return None

    async def notify_epoch_committed(self, epoch: int, checkpoint: SourceCheckpoint) -> None:
        """``epoch`` is durable and ``checkpoint`` is exactly what its manifest holds.

        Sources may advance external, advisory state (broker group offsets) to it. An empty
        checkpoint advances nothing. Idempotent: a retry after cancellation is legal.
        """
        return None
