"""Source generations: build one from the durable manifest, call it under a deadline, retire it.

A *generation* is one started :class:`~laminar_kafka.connector.protocol.SourceConnector` value. It is never
restarted: a failure, a cancellation under ``RETIRE_CONNECTOR``, or a loss of ownership without a
committed drain retires it (close, then wait for its detached tasks), and the runtime builds the
next one from the last durable manifest. The connector's two policies are read once, right after
``start``, and kept with the generation (the protocol says they are stable from then on).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from laminar_kafka.cluster.errors import ClusterError, RuntimeFailure
from laminar_kafka.cluster.runtime.context import RuntimeContext
from laminar_kafka.cluster.runtime.state import START_RETRY_S, RuntimeOptions, pinned_start_config
from laminar_kafka.connector.checkpoint import SourceCheckpoint
from laminar_kafka.connector.errors import ConnectorError, TransientError
from laminar_kafka.connector.protocol import (
    CheckpointAttempt,
    ConnectorCancellationPolicy,
    ConnectorConfig,
    SourceCheckpointUnavailablePolicy,
    SourceConnector,
    SourcePosition,
    SourceStart,
)
from laminar_kafka.coordinator.base import Manifest
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot, VnodeRegistry
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.errors import ErrorRateExceededError

logger = logging.getLogger(__name__)

__all__ = [
    "CallCancelled", "Generations", "SourceGeneration", "bounded", "retire_generation", "start_generation",
    "start_position",
]

T = TypeVar("T")


class CallCancelled(ClusterError):
    """A connector call ran past its deadline and the runtime cancelled it."""


@dataclass(frozen=True)
class SourceGeneration:
    """One started connector and the policies it declared after ``start``."""

    number: int
    connector: SourceConnector
    checkpoint_unavailable: SourceCheckpointUnavailablePolicy
    cancellation: ConnectorCancellationPolicy

    @property
    def polls_while_unreconciled(self) -> bool:
        """``POLL_TO_REPLAY_BOUNDARY``: one batch per turn may be polled while ``try_checkpoint()``
        is ``None`` (the retained barrier is retried before every poll); ``HOLD_INTAKE``: none."""
        return self.checkpoint_unavailable is SourceCheckpointUnavailablePolicy.POLL_TO_REPLAY_BOUNDARY

    @property
    def retired_by_cancellation(self) -> bool:
        """``RETIRE_CONNECTOR``: a cancelled call makes the generation terminal; ``CANCEL_SAFE``:
        the runtime keeps using it."""
        return self.cancellation is ConnectorCancellationPolicy.RETIRE_CONNECTOR


def start_position(options: RuntimeOptions, manifest: Manifest | None) -> tuple[SourcePosition, ConnectorConfig]:
    """Where a generation starts: the connector's initial position without a manifest; exactly the
    pinned offsets for the initial manifest (epoch 0, nothing resolved again); else a resume at
    the manifest's cursors. Pure."""
    connector = options.connector_config()
    if manifest is None:
        return SourcePosition.Initial(), connector
    cursors = dict(manifest.cursors.get(options.source_identity, {}))
    if manifest.epoch == 0:
        return SourcePosition.Initial(), pinned_start_config(connector, cursors)
    checkpoint = SourceCheckpoint(cursors, manifest.assignment_version if options.vnode_mode else 0)
    return SourcePosition.Resume(CheckpointAttempt(manifest.epoch, manifest.epoch), checkpoint), connector


async def start_generation(
    number: int,
    connector: SourceConnector,
    options: RuntimeOptions,
    registry: VnodeRegistry,
    manifest: Manifest | None,
) -> SourceGeneration:
    """Bind ``connector`` to the vnode registry (vnode mode) and start it at ``manifest``.

    Raises the connector's error (a :class:`~laminar_kafka.connector.errors.TransientError` is worth a
    retry); the connector leaves nothing open then.
    """
    position, config = start_position(options, manifest)
    if options.vnode_mode:
        connector.set_vnode_assignment(options.source_identity, registry, options.node_id)
    await connector.start(SourceStart(config, position, options.delivery))
    return SourceGeneration(
        number, connector, connector.checkpoint_unavailable_policy(), connector.cancellation_policy()
    )


async def bounded(call: Awaitable[T], timeout_s: float, what: str) -> T:
    """Await ``call``; cancel it after ``timeout_s`` and raise :class:`CallCancelled`."""
    scope = asyncio.timeout(timeout_s)
    try:
        async with scope:
            return await call
    except TimeoutError as exc:
        if not scope.expired():
            raise  # the connector's own TimeoutError
        raise CallCancelled(f"{what} did not return within {timeout_s:.1f}s and was cancelled", cause=exc) from exc


async def retire_generation(generation: SourceGeneration, wait_s: float) -> bool:
    """Close ``generation`` and wait up to ``wait_s`` for its ``terminal_task_tracker()``.

    Returns False (after logging an error) when its detached tasks (a reader thread, a consumer)
    are still alive then: the caller must not start another generation beside them.
    """
    connector = generation.connector
    try:
        await connector.close()
    except (ConnectorError, ConfigurationError) as exc:
        logger.warning("closing a retired source failed: %s", exc)
    tracker = connector.terminal_task_tracker()
    if tracker is None or await tracker.wait(wait_s):
        return True
    logger.error(
        "source generation %d: its detached tasks are still running %.0fs after close", generation.number, wait_s
    )
    return False


class Generations:
    """The running source generation of one node, and the failures and retries around it.

    At most one generation runs; :meth:`retire` ends it (close, await its detached tasks, drop
    the unsealed output) before :meth:`start` may build the next one.
    """

    def __init__(
        self,
        context: RuntimeContext,
        source_factory: Callable[[], SourceConnector],
        on_retired: Callable[[SourceGeneration | None], None],
    ) -> None:
        """``on_retired(generation or None)`` is called on every :meth:`retire` (the other parts of
        the runtime forget what they owed the generation)."""
        self._context = context
        self._source_factory = source_factory
        self._on_retired = on_retired
        self.current: SourceGeneration | None = None
        #: consecutive failures (reset by a committed epoch); the node gives up past the option's limit
        self.failures = 0
        self._started_count = 0
        self._retry_at = 0.0
        #: since when intake is held (``checkpoint_ready()`` is False), for the stuck-reconciliation warning
        self.held_since: float | None = None

    def may_start(self) -> bool:
        """Whether a start attempt is due (none runs, and no transient start failure is cooling down)."""
        return self.current is None and time.monotonic() >= self._retry_at

    def is_current(self, generation: SourceGeneration) -> bool:
        return self.current is generation

    def note_held(self, generation: SourceGeneration, snapshot: AssignmentSnapshot | None, active_round: object) -> None:
        """Intake is held this turn; warn every 10 s while it lasts: reconciliation is stuck somewhere."""
        version = snapshot.version if snapshot is not None else None
        now = time.monotonic()
        if self.held_since is None:
            self.held_since = now
        elif now - self.held_since > 10.0:
            self.held_since = now
            waiting = generation.connector.acquisition_needed() if self._context.options.vnode_mode else None
            logger.warning(
                "intake held for 10 s: version %s, drain %s, waiting for cursors %s", version, active_round, waiting
            )

    async def start(self, registry: VnodeRegistry, manifest: Manifest | None) -> None:
        """Start the next generation at ``manifest``. A transient failure is retried after
        :data:`START_RETRY_S`; any other raises :class:`RuntimeFailure`."""
        assert self.current is None
        self._started_count += 1
        connector = self._source_factory()
        try:
            generation = await start_generation(self._started_count, connector, self._context.options, registry, manifest)
        except TransientError as exc:  # e.g. a partition without a leader yet, a broker restarting
            self._retry_at = time.monotonic() + START_RETRY_S
            logger.warning("source start failed transiently (%s); retrying in %.0fs", exc, START_RETRY_S)
            return
        except (ConnectorError, ConfigurationError) as exc:
            raise RuntimeFailure(f"source start failed: {exc}", cause=exc) from exc
        self.current = generation
        logger.info(
            "source generation started from %s",
            f"manifest {manifest.epoch}" if manifest is not None else "the initial position",
        )

    async def retire(self, *, final: bool = False) -> None:
        """Retire the running generation (if any) and drop the unsealed output. Raises
        :class:`RuntimeFailure` (unless ``final``) when its detached tasks outlive ``retire_wait_s``:
        no generation may start beside them."""
        generation, self.current = self.current, None
        self._on_retired(generation)
        terminated = True
        if generation is not None:
            terminated = await retire_generation(generation, self._context.options.retire_wait_s)
        context = self._context
        await context.executors.in_sink(context.sink.discard_unsealed)
        if generation is not None and not terminated and not final:
            raise RuntimeFailure(
                f"source generation {generation.number} did not terminate within "
                f"{context.options.retire_wait_s:.0f}s of its close; refusing to start another beside it"
            )

    async def failed(self, exc: Exception, *, retire: bool = True) -> None:
        """Count a failure of the running generation and retire it, unless ``retire`` is False (a
        cancel-safe generation whose call was cancelled). Past ``max_generation_failures``
        consecutive failures: :class:`RuntimeFailure`, at once for :class:`ErrorRateExceededError` (the
        bad-record limit: the same records would fail again). A :class:`TransientError` (a dependency
        such as the schema registry unreachable; the poll consumed nothing) is not counted: the
        generation is retired and the next one starts after :data:`START_RETRY_S`, until it works."""
        options, metrics = self._context.options, self._context.metrics
        if isinstance(exc, ErrorRateExceededError):
            raise RuntimeFailure(f"source failed: {exc}", cause=exc) from exc
        if isinstance(exc, TransientError):
            logger.warning("source failed transiently (%s); restarting from the last manifest in %.0fs",
                           exc, START_RETRY_S)
            metrics.generations_retired.labels(metrics.node).inc()
            await self.retire()
            self._retry_at = time.monotonic() + START_RETRY_S
            return
        self.failures += 1
        if self.failures > options.max_generation_failures:
            raise RuntimeFailure(f"source failed {self.failures} times in a row: {exc}", cause=exc) from exc
        if not retire:
            logger.warning("%s; the source is cancel-safe, its generation is kept", exc)
            return
        logger.warning("source generation failed (%s); restarting from the last manifest", exc)
        metrics.generations_retired.labels(metrics.node).inc()
        await self.retire()
