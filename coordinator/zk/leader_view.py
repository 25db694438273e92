"""The leader's reads of one pipeline in ZooKeeper: a :class:`~laminar_kafka.coordinator.engine.steps.View` per pass.

Reads are issued in parallel; member, candidate, ack, load and epoch-ask data come from a cache that
watches invalidate (cleared on any session state change), so a pass costs about three round trips;
each ack's content is decoded once. Every watch that fires kicks the leader (``kick``).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import WatchedEvent

from laminar_kafka.coordinator import layout
from laminar_kafka.coordinator.engine.steps import MemberFence, View
from laminar_kafka.coordinator.errors import CodecError
from laminar_kafka.coordinator.layout import ChunkPending
from laminar_kafka.coordinator.state import ControlState
from laminar_kafka.coordinator.values import EpochAck, Manifest, Member
from laminar_kafka.coordinator.zk.chunks import ManifestStore, read_value

logger = logging.getLogger(__name__)

__all__ = ["LeaderViews"]


class LeaderViews:
    """Reads the leader's view under ``base``. Thread-safe (watches fire on kazoo's threads)."""

    def __init__(self, client: KazooClient, base: str, timeout: float, manifests: ManifestStore,
                 kick: Callable[[], None]) -> None:
        self._client = client
        self.base = base
        self._timeout = timeout
        self._manifests = manifests
        self._kick = kick
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[bytes, int]] = {}  # path -> (data, data version)
        #: bumped by every invalidation: a read whose watch fired before its result was stored
        #: must not be cached (the watch is spent, so nothing would ever clear the stale entry)
        self._invalidations = 0
        self._assembled: dict[str, tuple[bytes, bytes]] = {}  # chunked ack path -> (header, value)
        #: ack path -> (value, its decoding): the leader decodes an ack once per content, not per pass
        self._decoded_acks: dict[str, tuple[bytes, EpochAck]] = {}
        #: an exists-watch waits for the ``epoch_wanted`` node's creation
        self._wanted_watched = False

    def path(self, relative: str) -> str:
        return f"{self.base}/{relative}"

    def _kick_watch(self, _event: WatchedEvent) -> None:
        self._kick()

    def clear_cache(self) -> None:
        """Forget every cached read (watches may have been missed while disconnected)."""
        with self._lock:
            self._cache.clear()
            self._assembled.clear()
            self._invalidations += 1
            self._wanted_watched = False

    def read(self, now_ms: int) -> tuple[View, int]:
        """The view of one leader pass and the register's data version (-1: no register)."""
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
        elected = {c: found[p][0] for c, p in zip(candidates, candidate_paths, strict=True) if p in found}
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
        self._kick()

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
