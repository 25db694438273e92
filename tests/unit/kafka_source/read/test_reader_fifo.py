from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Message

from laminar_kafka.connector.errors import FatalError, TransientError
from laminar_kafka.kafka_source.read.fifo import ByteBoundedFifo, PartitionsAssigned, ReaderFailed, RecordChunk
from tests.unit.kafka_source.wiring import records_of


def chunk(n: int, nbytes: int) -> RecordChunk:
    return RecordChunk(records_of([Message(topic="t", partition=0, offset=i, value=b"x") for i in range(n)]), {}, nbytes)


def test_put_blocks_at_byte_cap_until_release() -> None:
    fifo = ByteBoundedFifo(max_bytes=100)
    stop = threading.Event()
    first = chunk(1, 100)
    assert fifo.put_chunk(first, stop)  # an empty FIFO always admits a chunk
    assert fifo.nbytes == 100
    done = threading.Event()

    def producer() -> None:
        fifo.put_chunk(chunk(1, 10), stop)
        done.set()

    thread = threading.Thread(target=producer)
    thread.start()
    assert not done.wait(0.3)  # blocked: the cap is reached
    fifo.release_head(first)
    assert done.wait(2)
    thread.join()
    assert fifo.nbytes == 10


def test_oversized_chunk_is_admitted_into_empty_fifo() -> None:
    fifo = ByteBoundedFifo(max_bytes=10)
    assert fifo.put_chunk(chunk(3, 1_000), threading.Event())
    assert fifo.nbytes == 1_000


def test_stop_unblocks_a_full_put() -> None:
    fifo = ByteBoundedFifo(max_bytes=10)
    stop = threading.Event()
    fifo.put_chunk(chunk(1, 10), stop)
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(fifo.put_chunk(chunk(1, 10), stop)))
    thread.start()
    time.sleep(0.05)
    stop.set()
    fifo.wake()
    thread.join(2)
    assert result == [False]
    assert len(fifo) == 1


def test_control_items_are_never_refused_and_keep_order() -> None:
    fifo = ByteBoundedFifo(max_bytes=10)
    stop = threading.Event()
    data = chunk(2, 10)
    fifo.put_chunk(data, stop)
    marker = PartitionsAssigned({("t", 1): 0})
    failure = ReaderFailed(TransientError("x"))
    fifo.put_control(marker)
    fifo.put_control(failure)
    assert fifo.nbytes == 10
    assert fifo.peek(100) == [data, marker, failure]
    assert fifo.peek(1) == [data]
    fifo.release_head(data)
    assert fifo.nbytes == 0
    assert fifo.head() is marker


def test_release_must_be_head() -> None:
    fifo = ByteBoundedFifo(max_bytes=10)
    stop = threading.Event()
    a, b = chunk(1, 1), chunk(1, 1)
    fifo.put_chunk(a, stop)
    fifo.put_chunk(b, stop)
    with pytest.raises(FatalError):
        fifo.release_head(b)


def test_peek_counts_remaining_records() -> None:
    fifo = ByteBoundedFifo(max_bytes=1_000)
    stop = threading.Event()
    a, b = chunk(5, 1), chunk(5, 1)
    fifo.put_chunk(a, stop)
    fifo.put_chunk(b, stop)
    a.taken = 4
    assert fifo.peek(3) == [a, b]
    assert fifo.peek(1) == [a]


async def test_event_cleared_only_when_empty() -> None:
    import asyncio

    event = asyncio.Event()
    calls: list[int] = []
    fifo = ByteBoundedFifo(max_bytes=100, on_ready=lambda: calls.append(1))
    event.set()
    assert fifo.clear_event_if_empty(event)
    assert not event.is_set()
    fifo.put_chunk(chunk(1, 1), threading.Event())
    assert calls == [1]
    event.set()
    assert not fifo.clear_event_if_empty(event)
    assert event.is_set()
