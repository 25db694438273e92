"""Values larger than one ZooKeeper node, create-once records and the manifest cache: the kazoo side
of the chunk codec of :mod:`laminar_kafka.coordinator.layout`.

A value (a manifest or an ack, as JSON bytes) of at most ``chunk_bytes`` is a node's data itself; a
larger one is a *chunked* node (header + ``chunk-NNNN`` children, see :mod:`laminar_kafka.coordinator.layout`).
ZooKeeper bounds one request (``jute.maxbuffer``, 1 MB by default), so the chunks are written one
request each. While they are written the node's data is PENDING (empty): the writer creates the node
PENDING with the first chunk, then publishes the header with ``set_data(path, header, version=0)`` in
its last write (a leader puts it in its step's fenced transaction, so a manifest and its commit
appear together). A reader that finds PENDING, a missing chunk, or chunks whose size or xxh3 differ
from the header gets :class:`~laminar_kafka.coordinator.layout.ChunkPending`; the header's publication changes the
node's data, so a data watch on it tells the reader when to look again.

This module holds the kazoo calls; it has no coordinator state.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from laminar_kafka.coordinator.errors import CodecError, CoordinatorError
from laminar_kafka.coordinator.layout import (
    PENDING,
    ChunkPending,
    checkpoint_path,
    chunk_name,
    join_chunks,
    parse_header,
    split_chunks,
)
from laminar_kafka.coordinator.manifest_delta import StoredEncoding, decode_stored, encode_stored
from laminar_kafka.coordinator.store import StoredManifest
from laminar_kafka.coordinator.values import Manifest
from laminar_kafka.errors import LaminarError

logger = logging.getLogger(__name__)

__all__ = [
    "ManifestStore",
    "read_value",
    "write_chunks",
    "descendants",
    "commit_or_raise",
    "create_once",
    "pin_names",
]

def commit_or_raise(txn: Any) -> None:
    """Commit a kazoo transaction; raise its first real failure (not a RolledBackError)."""
    results = txn.commit()
    failures = [r for r in results if isinstance(r, Exception)]
    if failures:
        raise next((f for f in failures if type(f).__name__ != "RolledBackError"), failures[0])


def read_value(client: KazooClient, path: str, raw: bytes, timeout: float) -> bytes:
    """The value stored at ``path`` whose node data is ``raw``: ``raw`` itself, or its chunks.

    Raises ChunkPending (PENDING, a missing chunk, a size or hash mismatch) and CodecError for a
    malformed header.
    """
    if raw == PENDING:
        raise ChunkPending(f"{path} is being written")
    header = parse_header(raw)
    if header is None:
        return raw
    pending = [client.get_async(f"{path}/{chunk_name(i)}") for i in range(header.chunks)]
    chunks: list[bytes | None] = []
    for result in pending:
        try:
            chunks.append(result.get(timeout=timeout)[0])
        except NoNodeError:
            chunks.append(None)
    return join_chunks(path, header, chunks)


def write_chunks(
    client: KazooClient, path: str, data: bytes, chunk_bytes: int,
    begin: Callable[[], Any], commit: Callable[[Any, str], None],
) -> bytes:
    """Write ``data`` as the PENDING node ``path`` and its chunks; return the header to publish.

    ``path`` must not exist (clear it first: :func:`descendants`). Each chunk is one transaction
    from ``begin()`` (a leader's fenced transaction, or a plain one) committed by ``commit(txn,
    what)``, which raises on failure. The caller publishes the returned header with
    ``set_data(path, header, version=0)``; until then readers see PENDING.
    """
    header, chunks = split_chunks(data, chunk_bytes)
    for index, chunk in enumerate(chunks):
        txn = begin()
        if index == 0:
            txn.create(path, PENDING)
        txn.create(f"{path}/{chunk_name(index)}", chunk)
        commit(txn, f"chunk {index} of {path}")
    return header.to_json()


def descendants(client: KazooClient, path: str) -> list[str]:
    """``path`` and everything under it, children before parents (the order deletes need);
    empty when ``path`` does not exist."""
    try:
        children = client.get_children(path)
    except NoNodeError:
        return []
    result: list[str] = []
    for child in children:
        result.extend(descendants(client, f"{path}/{child}"))
    result.append(path)
    return result


def create_once(
    client: KazooClient, path: str, data: bytes, chunk_bytes: int, lock_path: str, timeout: float,
) -> bytes:
    """Store ``data`` at ``path`` unless a value is already stored there; return the stored value.

    Writers serialise on a kazoo lock at ``lock_path`` (its nodes are ephemeral, so a writer that
    dies releases it). Under the lock, a complete value wins; a PENDING or incomplete node can only
    be the debris of a writer that died mid-write, and is replaced. A small value is one plain
    create, a large one chunks plus its header. Raises CoordinatorError when the lock is not
    acquired in ``timeout`` seconds.
    """
    lock = client.Lock(lock_path)
    if not lock.acquire(timeout=timeout):
        raise CoordinatorError(f"lock {lock_path} not acquired in {timeout}s")
    try:
        try:
            raw, _ = client.get(path)
            return read_value(client, path, raw, timeout)
        except NoNodeError:
            pass
        except ChunkPending:
            logger.warning("replacing %s, left incomplete by a writer that died", path)
            txn = client.transaction()
            for doomed in descendants(client, path):
                txn.delete(doomed)
            commit_or_raise(txn)
        if len(data) <= chunk_bytes:
            client.create(path, data)
        else:
            header = write_chunks(client, path, data, chunk_bytes, client.transaction,
                                  lambda txn, _what: commit_or_raise(txn))
            client.set(path, header, version=0)
        return data
    finally:
        lock.release()


def pin_names(client: KazooClient, folder: str, values: Mapping[str, str], timeout: float) -> dict[str, str]:
    """Create-once ``folder/<name>`` holding ``value`` (UTF-8) for each item; return the stored value
    of every name (an existing node wins). Names must be safe path segments (the caller checks)."""
    client.ensure_path(folder)
    creates = {name: client.create_async(f"{folder}/{name}", value.encode()) for name, value in values.items()}
    result: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    for name, pending in creates.items():
        try:
            pending.get(timeout=max(0.0, deadline - time.monotonic()))
            result[name] = values[name]
        except NodeExistsError:
            result[name] = client.get(f"{folder}/{name}")[0].decode()
    return result


class _BaseCollected(LaminarError):
    """The base of a manifest delta is gone: garbage collection keeps a delta's base while the delta
    is among the manifests it must keep, so the delta is past that window and counts as collected.
    A signal caught in this module; not a CoordinatorError, so no clause of the decoder swallows it."""


class ManifestStore:
    """Committed manifests at ``<base>/checkpoints/<epoch>`` (epoch 0: the pinned initial manifest),
    with a read cache (a manifest never changes once committed). Thread-safe.

    ``full_every``: store manifests as deltas over a full one less than that many epochs older
    (:mod:`laminar_kafka.coordinator.manifest_delta`); None stores every manifest full. Reading
    understands both, whatever ``full_every`` is."""

    def __init__(self, client: KazooClient, base: str, timeout: float, keep: int, full_every: int | None) -> None:
        self._client = client
        self._base = base
        self._timeout = timeout
        self._keep = keep
        self._full_every = full_every
        self._lock = threading.Lock()
        self._cache: dict[int, Manifest] = {}
        #: epochs of the cache stored full (slot 0 never counts: it may hold a seed of another epoch)
        self._full_epochs: set[int] = set()
        #: the newest manifest known to be stored full at its own slot: the base of the next delta
        self._newest_full: Manifest | None = None

    def encode(self, manifest: Manifest) -> StoredEncoding:
        """The bytes to store ``manifest`` as (a delta when allowed and smaller); remember it with
        :meth:`remember` (and whether it is full) once the write committed."""
        if self._full_every is None:
            return StoredEncoding(manifest.to_json(), True)
        with self._lock:
            base = self._newest_full
        return encode_stored(manifest, base, self._full_every)

    def read(self, epoch: int) -> Manifest:
        """Manifest ``epoch``; CoordinatorError when absent (never written, collected) or malformed."""
        manifest = self.find(epoch)
        if manifest is None:
            raise CoordinatorError(f"manifest {epoch} does not exist (never committed or pinned, or collected)")
        return manifest

    def find(self, epoch: int) -> Manifest | None:
        """Manifest ``epoch``, or None when absent or still being written; CoordinatorError when malformed."""
        with self._lock:
            cached = self._cache.get(epoch)
        if cached is not None:
            return cached
        try:
            stored = self.read_stored(epoch)
        except ChunkPending:
            return None
        return None if stored is None else stored.manifest

    def read_stored(self, epoch: int) -> StoredManifest | None:
        """Manifest ``epoch`` as stored now (never the cache, which it fills) with its node's
        modification time; None when absent. ChunkPending while it is being written or when its
        chunks do not match its header; CoordinatorError (CodecError) when malformed."""
        path = f"{self._base}/{checkpoint_path(epoch)}"
        try:
            raw, stat = self._client.get(path)
        except NoNodeError:
            return None
        try:
            manifest, full = decode_stored(read_value(self._client, path, raw, self._timeout), self._base_manifest)
        except _BaseCollected:
            return None  # kept past its window while its base was collected: collected too
        if manifest.epoch != epoch and epoch != 0:  # slot 0 holds the pinned start, or a seed (reset)
            raise CoordinatorError(f"{path} holds manifest {manifest.epoch}")
        self.remember(manifest, full=full and manifest.epoch == epoch)
        return StoredManifest(manifest, stat.mtime / 1000.0)

    def _base_manifest(self, epoch: int) -> Manifest:
        """The full manifest at slot ``epoch`` a delta is written over (cached, else read);
        :class:`_BaseCollected` when it is absent, CodecError when it is not stored full."""
        with self._lock:
            if epoch in self._full_epochs:
                return self._cache[epoch]
        path = f"{self._base}/{checkpoint_path(epoch)}"
        try:
            raw, _ = self._client.get(path)
        except NoNodeError:
            raise _BaseCollected(f"the base manifest {epoch} is gone") from None
        try:  # the full decoder refuses another format first, naming it
            manifest = Manifest.from_json(read_value(self._client, path, raw, self._timeout))
        except CodecError as exc:
            raise CodecError(f"the base manifest {epoch} of a manifest delta: {exc.message}", cause=exc) from exc
        self.remember(manifest, full=True)
        return manifest

    def remember(self, manifest: Manifest, *, full: bool = True) -> None:
        """Cache ``manifest``, stored at slot ``manifest.epoch`` (``full``: as format 1, so it may be a
        delta's base); old entries are dropped, never epoch 0."""
        with self._lock:
            self._cache[manifest.epoch] = manifest
            if full and manifest.epoch > 0:
                self._full_epochs.add(manifest.epoch)
                if self._newest_full is None or manifest.epoch > self._newest_full.epoch:
                    self._newest_full = manifest
            else:
                self._full_epochs.discard(manifest.epoch)
            for old in [e for e in self._cache if 0 < e < manifest.epoch - 2 * self._keep]:
                del self._cache[old]
                self._full_epochs.discard(old)

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()
            self._full_epochs.clear()
            self._newest_full = None
