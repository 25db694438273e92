"""The CDC pipeline's producer: Debezium-shaped JSON change events for a bounded key space.

:class:`ChangeGenerator` (pure: no I/O, no clock) makes the changes. Each topic has ``keys_per_partition``
keys per partition, and key ``id`` lives in partition ``id // keys_per_partition`` for ever (so a key's
changes all land in one partition, and partitions added later bring keys never seen before). A change
to a key that does not exist creates it (``op`` ``c``, or ``r`` as a snapshot read would); to one that
does, updates it (``u``) or deletes it (``d``), a delete followed, on the next record of the partition,
by Debezium's tombstone (the same key, a null value). The record key is Debezium's key, the JSON
object ``{"id": N}``; the value is the envelope without the schema wrapper
(``{"before": ..., "after": ..., "op": ..., "ts_ms": ..., "source": ...}``), each row
``{"id": N, "seq": S, "val": "kN-sS"}`` where ``S`` is the number of the record (unique in the run).
A burst (:meth:`ChangeGenerator.burst`) gives a few keys a share of the production (hot keys).

:class:`CdcProducer` is :class:`~laminar_kafka.chaos.producer.ChaosProducer` producing those changes
(same rate, acknowledgements, transactions). The audit does not trust the generator's view of the
keys: it replays the topic (:mod:`laminar_kafka.chaos.cdc.audit`).
"""
from __future__ import annotations

import json
import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from laminar_kafka.chaos.producer import ChaosProducer

__all__ = ["Burst", "CDC_NODE_FLAGS", "CdcProducer", "ChangeGenerator", "KEY_FIELD"]

#: the key field of every row (the nodes run with ``--upsert-keys id``)
KEY_FIELD = "id"


@dataclass(frozen=True)
class Burst:
    """Hot keys: ``keys`` (``(topic, id)``) take ``share`` of the records of their partitions; with
    ``deletes`` a hot key is deleted (and re-created) now and then too."""

    keys: tuple[tuple[str, int], ...]
    share: float
    deletes: bool = False


class ChangeGenerator:
    """Debezium change events over a bounded key space (see the module docstring). Not thread-safe
    except :meth:`burst` (one producing thread calls :meth:`next`)."""

    def __init__(self, keys_per_partition: int, seed: int = 0, delete_ratio: float = 0.1,
                 snapshot_ratio: float = 0.2) -> None:
        if keys_per_partition < 1:
            raise ValueError(f"keys_per_partition must be >= 1, got {keys_per_partition}")
        self.keys_per_partition = keys_per_partition
        self._rng = random.Random(f"cdc-changes/{seed}")
        self._delete_ratio = delete_ratio
        self._snapshot_ratio = snapshot_ratio
        #: (topic, id) -> the row as last sent (absent: never created, or deleted)
        self._rows: dict[tuple[str, int], dict[str, object]] = {}
        #: (topic, partition) -> the key whose tombstone the partition's next record is
        self._tombstones: dict[tuple[str, int], int] = {}
        self._burst: Burst | None = None
        self._lock = threading.Lock()
        self.ops: dict[str, int] = {"c": 0, "r": 0, "u": 0, "d": 0, "tombstone": 0}

    def partition_of(self, key: int) -> int:
        return key // self.keys_per_partition

    def keys_of(self, partition: int) -> range:
        """The ids of ``partition``'s keys."""
        return range(partition * self.keys_per_partition, (partition + 1) * self.keys_per_partition)

    def burst(self, burst: Burst | None) -> None:
        """Start a burst of changes to hot keys (None: end it)."""
        with self._lock:
            self._burst = burst

    def _choose(self, topic: str, partition: int) -> tuple[int, bool]:
        """(key, whether it is a hot key) of the next change of ``topic:partition``."""
        with self._lock:
            burst = self._burst
        if burst is not None:
            hot = [k for t, k in burst.keys if t == topic and self.partition_of(k) == partition]
            if hot and self._rng.random() < burst.share:
                return self._rng.choice(hot), burst.deletes
        keys = self.keys_of(partition)
        return self._rng.randrange(keys.start, keys.stop), True

    def next(self, topic: str, partition: int, seq: int, ts_ms: int = 0) -> tuple[bytes, bytes | None]:
        """The next record of ``topic:partition``: (key, value), value None for a tombstone. ``seq``:
        the record's number in the run (in its row)."""
        pending = self._tombstones.pop((topic, partition), None)
        if pending is not None:
            self.ops["tombstone"] += 1
            return _key(pending), None
        key, deletable = self._choose(topic, partition)
        before = self._rows.get((topic, key))
        after: dict[str, object] | None = {KEY_FIELD: key, "seq": seq, "val": f"k{key}-s{seq}"}
        if before is None:
            op = "r" if self._rng.random() < self._snapshot_ratio else "c"
        elif deletable and self._rng.random() < self._delete_ratio:
            op, after = "d", None
            self._tombstones[(topic, partition)] = key
        else:
            op = "u"
        if after is None:
            self._rows.pop((topic, key), None)
        else:
            self._rows[(topic, key)] = after
        self.ops[op] += 1
        envelope = {"before": before, "after": after, "op": op, "ts_ms": ts_ms,
                    "source": {"connector": "laminar-chaos", "table": topic}}
        return _key(key), json.dumps(envelope, separators=(",", ":")).encode()


def _key(key: int) -> bytes:
    return json.dumps({KEY_FIELD: key}, separators=(",", ":")).encode()


class CdcProducer(ChaosProducer):
    """:class:`ChaosProducer` whose records are :class:`ChangeGenerator`'s change events. A record
    the client refused (a full queue) is offered again as it was, so the generator's view stays the
    topic's."""

    def __init__(self, bootstrap: str, rate: int, *, keys_per_partition: int, transactional_id: str | None = None,
                 seed: int = 0) -> None:
        super().__init__(bootstrap, rate, transactional_id=transactional_id, seed=seed)
        self.changes = ChangeGenerator(keys_per_partition, seed=seed)
        self._offered: tuple[int, str, int, tuple[bytes | None, bytes | None]] | None = None

    def _message(self, topic: str, partition: int) -> tuple[bytes | None, bytes | None]:
        offered = self._offered
        if offered is not None and offered[:3] == (self.produced, topic, partition):
            return offered[3]
        import time

        message = self.changes.next(topic, partition, self.produced, int(time.time() * 1000))
        self._offered = (self.produced, topic, partition, message)
        return message

    def hot(self, keys: Sequence[tuple[str, int]], share: float, deletes: bool = False) -> None:
        """Start a burst of changes to ``keys`` (see :class:`Burst`)."""
        self.changes.burst(Burst(tuple(keys), share, deletes))

    def cool(self) -> None:
        """End the burst."""
        self.changes.burst(None)


#: the flags the cdc pipeline's nodes run with (besides the campaign's): Debezium's JSON envelope,
#: its rows' schema (not inferred from a sample: a sample of deletes has no types), upserted by the key field
CDC_NODE_FLAGS = ("--format", "debezium-json", "--json-schema", f"{KEY_FIELD}:int64,seq:int64,val:string",
                  "--upsert-keys", KEY_FIELD)
