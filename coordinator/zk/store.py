"""ZooKeeperStore: the :class:`~laminar_kafka.coordinator.store.ControlStore` on a real ZooKeeper, through kazoo.

Paths and record bytes are :mod:`laminar_kafka.coordinator.layout`'s, under the pipeline's subtree; large values
are chunked (:mod:`laminar_kafka.coordinator.zk.chunks`).

Fencing: every leader write is one transaction that checks the leader's election node
(``check(candidate, version=0)``: it exists, so the session that created it is alive) and replaces
the register with ``set_data(assignment, version=<version read>)``; a failure of either (deposed
leader, paused leader whose session expired, or a stale view) rejects the whole write with
FencedError. The only leader writes outside that shape are the chunks of a large manifest and
garbage collection, which also check the election node and the register version without replacing
it; a manifest is committed only by the register's ``last_epoch``, never by the existence of its node
(a chunked manifest's header is published in the commit itself). A commit also checks the member
fences of the nodes whose acks it relies on (their member node at the data version read and the
election node of that boot): a node that lost its session and rejoined after the leader read it fails
the commit, which is retried from a fresh view.

The leader's reads are :mod:`laminar_kafka.coordinator.zk.leader_view`'s.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError, SessionExpiredError
from kazoo.protocol.states import WatchedEvent

from laminar_kafka.coordinator import layout
from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.engine.events import CoordinatorMetrics
from laminar_kafka.coordinator.engine.steps import Step, View, WriteManifest
from laminar_kafka.coordinator.errors import CodecError, FencedError, RoundError
from laminar_kafka.coordinator.manifest_delta import collect_limit
from laminar_kafka.coordinator.state import ControlState
from laminar_kafka.coordinator.store import ControlStore, EpochGone, Leadership, StoredManifest
from laminar_kafka.coordinator.values import EpochAck, Manifest, Member
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.coordinator.zk.chunks import (  # read_value is re-exported (cluster tools read manifests with it)
    ManifestStore,
    commit_or_raise,
    create_once,
    descendants,
    pin_names,
    read_value,
    write_chunks,
)
from laminar_kafka.coordinator.zk.leader_view import LeaderViews

logger = logging.getLogger(__name__)

__all__ = ["ZooKeeperStore", "read_value"]

#: Ops per garbage-collection transaction.
_GC_BATCH = 64


class ZooKeeperStore(ControlStore):
    """See the module docstring. Thread-safe. ``on_change`` is called (from kazoo's threads, never
    blocking) whenever a watched input of the leader changes."""

    def __init__(self, client: KazooClient, config: CoordinatorConfig, metrics: CoordinatorMetrics) -> None:
        self._client = client
        self.config = config
        self.base = layout.pipeline_path(config)
        self._metrics = metrics
        self._timeout = config.session_timeout
        #: a delta's base is less than this many epochs older (None: every manifest stored full)
        self._full_every = config.manifests_to_keep if config.manifest_deltas else None
        self._manifests = ManifestStore(client, self.base, config.session_timeout, config.manifests_to_keep,
                                        self._full_every)
        self.on_change: Callable[[], None] = lambda: None
        self._views = LeaderViews(client, self.base, config.session_timeout, self._manifests,
                                  kick=lambda: self.on_change())

    def path(self, relative: str) -> str:
        """The absolute path of a layout path."""
        return f"{self.base}/{relative}"

    def clear_cache(self) -> None:
        """Forget every cached read of the leader's (watches may have been missed while disconnected)."""
        self._views.clear_cache()

    def forget_manifests(self) -> None:
        """Drop the manifest cache (the next reads go to ZooKeeper)."""
        self._manifests.clear()

    # ---- the leader's side ------------------------------------------------------------------------

    def read_view(self, now_ms: int) -> tuple[View, int]:
        return self._views.read(now_ms)

    def apply(self, term: Leadership, step: Step, expected_version: int) -> None:
        """One fenced transaction (plus, for a large manifest, fenced chunk writes first)."""
        creates: list[tuple[str, bytes]] = []
        headers: list[tuple[str, bytes]] = []
        stored_full = True
        for intent in step.intents:
            manifest_data = None
            if isinstance(intent, WriteManifest):
                encoding = self._manifests.encode(intent.manifest)
                manifest_data, stored_full = encoding.data, encoding.full
            for relative, data in layout.intent_records(intent, manifest_data):
                if len(data) > layout.MANIFEST_CHUNK_BYTES:
                    path = self.path(relative)
                    headers.append((path, self._write_chunked(term, expected_version, path, data)))
                else:
                    creates.append((self.path(relative), data))
        txn = self._client.transaction()
        txn.check(term.candidate, 0)
        if expected_version < 0:
            txn.create(self.path(layout.ASSIGNMENT), step.control.to_json())
        else:
            txn.set_data(self.path(layout.ASSIGNMENT), step.control.to_json(), version=expected_version)
        for fence in step.fences:
            for relative, version in layout.fence_checks(fence):
                txn.check(self.path(relative), version)
        for path, header in headers:
            txn.set_data(path, header, version=0)
        for path, data in creates:
            txn.create(path, data)
        self._commit(txn, f"{step.kind} v{step.control.version}")
        if step.manifest is not None:
            self._manifests.remember(step.manifest, full=stored_full)

    def _commit(self, txn: Any, what: str) -> None:
        self._metrics.bump("zk_transactions")
        self._metrics.bump("zk_write_ops", len(txn.operations))
        try:
            results = txn.commit()
        except SessionExpiredError as exc:  # our session (and so our election node) is gone
            raise FencedError(f"leader write rejected ({what}): session expired", cause=exc) from exc
        failures = [r for r in results if isinstance(r, Exception)]
        if failures:
            cause = next((f for f in failures if type(f).__name__ != "RolledBackError"), failures[0])
            raise FencedError(f"leader write rejected ({what}): {type(cause).__name__}", cause=cause)

    def _fence(self, term: Leadership, expected_version: int) -> Any:
        txn = self._client.transaction()
        txn.check(term.candidate, 0)
        if expected_version >= 0:
            txn.check(self.path(layout.ASSIGNMENT), expected_version)
        return txn

    def _write_chunked(self, term: Leadership, expected_version: int, path: str, data: bytes) -> bytes:
        """Write a large node PENDING + chunks, one fenced transaction per chunk, after clearing the
        debris of a leader that died mid-write; return the header the step publishes."""
        debris = descendants(self._client, path)
        if debris:
            txn = self._fence(term, expected_version)
            for doomed in debris:
                txn.delete(doomed)
            self._commit(txn, f"clear {path}")
        return write_chunks(self._client, path, data, layout.MANIFEST_CHUNK_BYTES,
                            lambda: self._fence(term, expected_version), self._commit)

    def collect_garbage(self, term: Leadership, control: ControlState, keep: int) -> None:
        """Fenced and best effort; the pinned initial manifest (checkpoint 0) is never deleted."""
        doomed: list[str] = []
        # the window of deltas is kept whatever this leader writes: an earlier leader may have written them
        checkpoints = collect_limit(control.last_epoch, keep, keep)
        for folder, limit in ((layout.CHECKPOINTS, checkpoints),
                              (layout.EPOCHS, control.last_epoch - keep), (layout.ROUNDS, control.version - keep)):
            for name in self._client.get_children(self.path(folder)):
                if name.isdigit() and 0 < int(name) <= limit:
                    doomed.append(self.path(f"{folder}/{name}"))
        if not doomed:
            return
        try:
            ops = [op for path in doomed for op in descendants(self._client, path)]
            for start in range(0, len(ops), _GC_BATCH):
                txn = self._fence(term, -1)
                for path in ops[start:start + _GC_BATCH]:
                    txn.delete(path)
                self._commit(txn, "garbage collection")
        except FencedError as exc:
            self._metrics.fenced_writes_rejected += 1
            logger.info("garbage collection deferred: %r", exc)
        except KazooException as exc:
            logger.info("garbage collection deferred: %r", exc)

    # ---- the nodes' side ------------------------------------------------------------------------

    def read_register(self, watch: Callable[[WatchedEvent], None] | None = None) -> ControlState | None:
        try:
            data, _ = self._client.get(self.path(layout.ASSIGNMENT), watch=watch)
        except NoNodeError:
            if watch is not None:
                self._client.exists(self.path(layout.ASSIGNMENT), watch=watch)
            return None
        return ControlState.from_json(data)

    def read_manifest(self, epoch: int) -> Manifest | None:
        return self._manifests.find(epoch)

    def read_rejection(self, epoch: int, name: str) -> str | None:
        try:
            raw, _ = self._client.get(self.path(layout.rejection_path(epoch, name)))
        except NoNodeError:
            return None
        return layout.parse_rejection(raw)

    # ---- an observer's side (read only) ---------------------------------------------------------

    def exists(self) -> bool:
        """Whether the pipeline's subtree exists (an observer asks first: no pipeline is no error
        of a read below, which would only find nothing)."""
        return self._client.exists(self.base) is not None

    def read_members(self) -> dict[int, Member]:
        try:
            names = self._client.get_children(self.path(layout.MEMBERS))
        except NoNodeError:
            return {}
        pending = {int(n): self._client.get_async(self.path(layout.member_path(int(n))))
                   for n in names if n.isdigit()}
        result: dict[int, Member] = {}
        for node, async_result in pending.items():
            try:
                data, _ = async_result.get(timeout=self._timeout)
            except NoNodeError:
                continue
            result[node] = Member.from_json(node, data)
        return result

    def read_leader(self) -> int | None:
        try:
            candidates = sorted(c for c in self._client.get_children(self.path(layout.LEADER))
                                if c.startswith(layout.CANDIDATE_PREFIX))
            if not candidates:
                return None
            return layout.parse_candidate(self._client.get(self.path(layout.candidate_path(candidates[0])))[0])[0]
        except (NoNodeError, CodecError):
            return None

    def read_stored_manifest(self, epoch: int) -> StoredManifest | None:
        return self._manifests.read_stored(epoch)

    def write_ack(self, ack: EpochAck) -> None:
        """Create or overwrite the ack node. Over MANIFEST_CHUNK_BYTES: replace it by PENDING +
        chunks, then publish the header (readers skip the ack meanwhile, and the header's publication
        fires their data watch). A small ack overwriting a chunked one just replaces the data (the
        old chunks are ignored, and collected with the epoch)."""
        path, data = self.path(layout.ack_path(ack.epoch, ack.node_id, ack.boot_id)), ack.to_json()
        try:
            if len(data) <= layout.MANIFEST_CHUNK_BYTES:
                try:
                    self._client.create(path, data)
                except NodeExistsError:
                    self._client.set(path, data)
                return
            debris = descendants(self._client, path)
            if debris:
                txn = self._client.transaction()
                for doomed in debris:
                    txn.delete(doomed)
                commit_or_raise(txn)
            header = write_chunks(self._client, path, data, layout.MANIFEST_CHUNK_BYTES, self._client.transaction,
                                  lambda txn, _what: commit_or_raise(txn))
            self._client.set(path, header, version=0)
        except NoNodeError as exc:
            raise EpochGone(f"epoch {ack.epoch} is closed", cause=exc) from exc
        except SessionExpiredError as exc:
            raise FencedError(f"ack of epoch {ack.epoch}: session expired", cause=exc) from exc

    def write_ready(self, drain_id: AssignmentDrainId, node_id: int, boot_id: str) -> None:
        try:
            self._client.create(self.path(layout.ready_path(drain_id.target_version, node_id, boot_id)), b"")
        except NodeExistsError:
            pass
        except NoNodeError as exc:
            raise RoundError(f"round {drain_id} no longer exists", cause=exc) from exc

    def pin_initial(self, manifest: Manifest) -> Manifest:
        """``checkpoints/<epoch 0>``, create-once under the lock ``locks/pin`` (chunked when large)."""
        stored = create_once(self._client, self.path(layout.checkpoint_path(0)), manifest.to_json(),
                             layout.MANIFEST_CHUNK_BYTES, self.path(layout.PIN_LOCK), self._timeout * 3)
        pinned = Manifest.from_json(stored)
        self._manifests.remember(pinned)
        return pinned

    def pin_topic_ids(self, ids: Mapping[str, str]) -> dict[str, str]:
        return pin_names(self._client, self.path(layout.TOPICS), ids, self._timeout)

    def pin_setting(self, name: str, value: str | None) -> str | None:
        if value is None:
            try:
                data: bytes = self._client.get(self.path(layout.setting_path(name)))[0]
                return data.decode()
            except NoNodeError:
                return None
        return pin_names(self._client, self.path(layout.SETTINGS), {name: value}, self._timeout)[name]

    def reset(self, seed: Manifest) -> None:
        """The register first (without it nothing below is read as committed), then epochs, rounds and
        manifests; then the seed's manifest and the pinned slot (each create-once, chunked if large)."""
        client = self._client
        try:
            client.delete(self.path(layout.ASSIGNMENT))
        except NoNodeError:
            pass
        for folder in (layout.EPOCHS, layout.ROUNDS, layout.CHECKPOINTS):
            try:
                client.delete(self.path(folder), recursive=True)
            except NoNodeError:
                pass
            client.ensure_path(self.path(folder))
        self.forget_manifests()
        self.clear_cache()
        for epoch in ((seed.epoch, 0) if seed.epoch else (0,)):
            create_once(client, self.path(layout.checkpoint_path(epoch)), seed.to_json(),
                        layout.MANIFEST_CHUNK_BYTES, self.path(layout.PIN_LOCK), self._timeout * 3)
        self._manifests.remember(seed)

    def write_epoch_wanted(self, after_epoch: int) -> None:
        """One write per ask (a node asks at most once per committed epoch); a lower value than the
        stored one is not written (two nodes racing: the higher ask stands)."""
        data, path = layout.epoch_wanted_data(after_epoch), self.path(layout.EPOCH_WANTED)
        try:
            raw, stat = self._client.get(path)
        except NoNodeError:
            try:
                self._client.create(path, data)
                return
            except NodeExistsError:
                raw, stat = self._client.get(path)
        try:
            if layout.parse_epoch_wanted(raw) >= after_epoch:
                return
        except CodecError:
            pass  # overwritten below
        try:
            self._client.set(path, data, version=stat.version)
        except BadVersionError:
            pass  # another node asked in between: its ask serves this one's too (a later ask follows)

    def write_vnode_load(self, load: Mapping[int, int]) -> None:
        data, path = layout.vnode_load_data(load), self.path(layout.VNODE_LOAD)
        try:
            self._client.set(path, data)
        except NoNodeError:
            try:
                self._client.create(path, data)
            except NodeExistsError:
                self._client.set(path, data)

