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

Reads for the leader are issued in parallel; member, candidate, ack and load data come from a cache
that watches invalidate (cleared on any session state change), so a pass costs about three round trips.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError, SessionExpiredError
from kazoo.protocol.states import WatchedEvent

from laminar_kafka.coordinator import layout
from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.errors import CodecError, FencedError, RoundError
from laminar_kafka.coordinator.engine.events import CoordinatorMetrics
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.coordinator.state import ControlState
from laminar_kafka.coordinator.engine.steps import MemberFence, Step, View, WriteManifest
from laminar_kafka.coordinator.manifest_delta import collect_limit
from laminar_kafka.coordinator.store import ControlStore, EpochGone, Leadership, StoredManifest
from laminar_kafka.coordinator.values import EpochAck, Manifest, Member
from laminar_kafka.coordinator.zk.chunks import (  # read_value is re-exported (cluster tools read manifests with it)
    ChunkPending,
    ManifestStore,
    commit_or_raise,
    create_once,
    descendants,
    pin_names,
    read_value,
    write_chunks,
)

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
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[bytes, int]] = {}  # path -> (data, data version)
        #: bumped by every invalidation: a read whose watch fired before its result was stored
        #: must not be cached (the watch is spent, so nothing would ever clear the stale entry)
        self._invalidations = 0
        self._assembled: dict[str, tuple[bytes, bytes]] = {}  # chunked ack path -> (header, value)
        #: ack path -> (value, its decoding): the leader decodes an ack once per content, not per pass
        self._decoded_acks: dict[str, tuple[bytes, EpochAck]] = {}
        self.on_change: Callable[[], None] = lambda: None
        #: an exists-watch waits for the ``epoch_wanted`` node's creation
        self._wanted_watched = False

    def path(self, relative: str) -> str:
        """The absolute path of a layout path."""
        return f"{self.base}/{relative}"

    def _kick_watch(self, _event: WatchedEvent) -> None:
        self.on_change()

    def clear_cache(self) -> None:
        """Forget every cached read (watches may have been missed while disconnected)."""
        with self._lock:
            self._cache.clear()
            self._assembled.clear()
            self._invalidations += 1
            self._wanted_watched = False

    def forget_manifests(self) -> None:
        """Drop the manifest cache (the next reads go to ZooKeeper)."""
        self._manifests.clear()

    # ---- the leader's side ------------------------------------------------------------------------

    def read_view(self, now_ms: int) -> tuple[View, int]:
        client, timeout = self._client, self._timeout
        register = client.get_async(self.path(layout.ASSIGNMENT), watch=self._kick_watch)
        names_async = client.get_children_async(self.path(layout.MEMBERS), watch=self._kick_watch)
        candidates_async = client.get_children_async(self.path(layout.LEADER))
        load_path = self.path(layout.VNODE_LOAD)
        try:
            data, stat = register.get(timeout=timeout)
            control: ControlState | None = ControlState.from_json(data)
            version = stat.version
        except NoNodeError:
            client.exists(self.path(layout.ASSIGNMENT), watch=self._kick_watch)
            control, version = None, -1
        acks_async = ready_async = rejected_async = None
        if control is not None and control.open_epoch:
            acks_async = client.get_children_async(self.path(layout.acks_folder(control.open_epoch)),
                                                   watch=self._kick_watch)
            rejected_async = client.get_children_async(self.path(layout.rejected_folder(control.open_epoch)))
        if control is not None and control.round is not None:
            ready_async = client.get_children_async(
                self.path(layout.ready_folder(control.round.drain_id.target_version)), watch=self._kick_watch)
        names = [n for n in names_async.get(timeout=timeout) if n.isdigit()]
        candidates = [c for c in candidates_async.get(timeout=timeout) if c.startswith(layout.CANDIDATE_PREFIX)]
        member_paths = {int(n): self.path(layout.member_path(int(n))) for n in names}
        candidate_paths = [self.path(layout.candidate_path(c)) for c in candidates]
        ack_paths: list[str] = []
        if acks_async is not None and control is not None:
            folder = self.path(layout.acks_folder(control.open_epoch))
            ack_paths = [f"{folder}/{n}" for n in acks_async.get(timeout=timeout)]
        wanted_path = self.path(layout.EPOCH_WANTED)
        found = self._cached_reads(list(member_paths.values()) + candidate_paths + [load_path, wanted_path] + ack_paths)
        members = {n: Member.from_json(n, found[p][0]) for n, p in member_paths.items() if p in found}
        versions = {n: found[p][1] for n, p in member_paths.items() if p in found}
        elected = {c: found[p][0] for c, p in zip(candidates, candidate_paths) if p in found}
        load = layout.parse_vnode_load(found[load_path][0]) if load_path in found else {}
        wanted = self._epoch_wanted(found.get(wanted_path), wanted_path)
        ack_values: dict[str, bytes] = {}
        for path in ack_paths:
            value = self._ack_value(path, found[path][0]) if path in found else None
            if value is not None:
                ack_values[path] = value
        acks = self._decode_acks(ack_values)
        ready: set[tuple[int, str]] = set()
        if ready_async is not None:
            for name in ready_async.get(timeout=timeout):
                try:
                    ready.add(layout.parse_ack_name(name))
                except CodecError:
                    continue
        rejections: frozenset[str] = frozenset()
        if rejected_async is not None:
            try:
                rejections = frozenset(rejected_async.get(timeout=timeout))
            except NoNodeError:
                pass
        if control is not None and control.last_epoch:
            latest: Manifest | None = self._manifests.read(control.last_epoch)
        else:
            latest = self._manifests.find(0)  # the pinned initial manifest, if any
        with self._lock:  # acks of closed epochs are never read again
            for path in [p for p in self._cache if "/epochs/" in p and p not in ack_paths]:
                del self._cache[path]
            for path in [p for p in self._assembled if p not in ack_paths]:
                del self._assembled[path]
        view = View(control, members, now_ms, tuple(acks), frozenset(ready), load, latest,
                    self._member_fences(members, versions, elected), rejections, wanted)
        return view, version

    def _epoch_wanted(self, found: tuple[bytes, int] | None, path: str) -> int:
        """The ``epoch_wanted`` value read (0 when absent: its creation is watched, or malformed:
        an ask is advisory, the quiet interval still bounds the wait)."""
        if found is None:
            if not self._wanted_watched:  # one watch for its creation (the pass that finds it re-arms one)
                self._wanted_watched = True
                self._client.exists(path, watch=self._invalidate)
            return 0
        self._wanted_watched = False
        try:
            return layout.parse_epoch_wanted(found[0])
        except CodecError:
            logger.warning("ignoring a malformed %s node: %r", layout.EPOCH_WANTED, found[0][:40])
            return 0

    @staticmethod
    def _member_fences(
        members: Mapping[int, Member], versions: Mapping[int, int], candidates: Mapping[str, bytes]
    ) -> dict[int, MemberFence]:
        """Per member: its member node at the data version read and the election node of its boot. A
        member whose election node is not there yet (between its two creates) has none."""
        by_boot: dict[tuple[int, str], str] = {}
        for name, raw in candidates.items():
            try:
                by_boot[layout.parse_candidate(raw)] = name
            except CodecError:
                continue
        result: dict[int, MemberFence] = {}
        for node, member in members.items():
            candidate = by_boot.get((node, member.boot_id))
            if candidate is not None:
                result[node] = MemberFence(node, versions[node], candidate)
        return result

    def _decode_acks(self, values: Mapping[str, bytes]) -> list[EpochAck]:
        """The acks of ``values`` (path -> value), in order; a malformed one is logged and left out.
        Each content is decoded once: a pass runs on every change under the open epoch, and strict
        decoding of a 1,000-partition ack costs milliseconds. Only this pass's paths stay cached."""
        acks: list[EpochAck] = []
        decoded: dict[str, tuple[bytes, EpochAck]] = {}
        for path, value in values.items():
            known = self._decoded_acks.get(path)
            if known is not None and known[0] == value:
                decoded[path] = known
                acks.append(known[1])
                continue
            try:
                ack = EpochAck.from_json(value)
            except CodecError as exc:
                logger.warning("ignoring malformed ack %s: %s", path, exc.message)
                continue
            decoded[path] = (value, ack)
            acks.append(ack)
        self._decoded_acks = decoded
        return acks

    def _cached_reads(self, paths: list[str]) -> dict[str, tuple[bytes, int]]:
        """``(data, data version)`` of ``paths`` (missing ones omitted), from the watch-invalidated
        cache or one parallel batch of reads that re-arm the watches.

        A watch can fire (on kazoo's thread) after a read returned and before its result is
        stored: that result is used for this pass but not cached, since the spent watch would
        leave a stale entry nothing clears (the leader then waited forever on an ack it had seen
        PENDING). The firing kicks the leader, whose next pass reads again.
        """
        with self._lock:
            result = {p: self._cache[p] for p in paths if p in self._cache}
            invalidations = self._invalidations
        pending = {p: self._client.get_async(p, watch=self._invalidate) for p in paths if p not in result}
        for path, async_result in pending.items():
            try:
                data, stat = async_result.get(timeout=self._timeout)
            except NoNodeError:
                continue
            result[path] = (data, stat.version)
            with self._lock:
                if self._invalidations == invalidations:
                    self._cache[path] = result[path]
        return result

    def _invalidate(self, event: WatchedEvent) -> None:
        with self._lock:
            self._cache.pop(event.path, None)
            self._invalidations += 1
        self.on_change()

    def _ack_value(self, path: str, raw: bytes) -> bytes | None:
        """An ack's bytes (reassembled when chunked; None while it is being written)."""
        try:
            cached = self._assembled.get(path)
            if cached is not None and cached[0] == raw:
                return cached[1]
            value = read_value(self._client, path, raw, self._timeout)
        except ChunkPending:
            return None  # the header's publication fires the data watch: read again then
        except CodecError as exc:
            logger.warning("ignoring ack %s: %s", path, exc.message)
            return None
        if value is not raw:
            with self._lock:
                self._assembled[path] = (raw, value)
        return value

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
                return self._client.get(self.path(layout.setting_path(name)))[0].decode()
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

