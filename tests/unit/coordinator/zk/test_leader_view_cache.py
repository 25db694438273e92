"""The leader's watch-invalidated read cache (``LeaderViews._cached_reads``) never keeps a value
whose watch has already fired. No server: a stand-in client delivers the watch of a change that
follows a read before the reader stores the read's result (kazoo runs watch callbacks on its own
thread, so this order happens under load; CI saw the leader wait forever on an ack it had cached
as PENDING)."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

from kazoo.protocol.states import WatchedEvent

from laminar_kafka.coordinator.zk.leader_view import LeaderViews


class ChangesRightAfterEachRead:
    """``get_async`` whose node changes right after the read; the change's watch fires before
    the result reaches the caller."""

    def __init__(self, values: list[bytes]) -> None:
        self.values = values
        self.reads = 0

    def get_async(self, path: str, watch: Callable[[WatchedEvent], None] | None = None) -> Any:
        client = self

        class Result:
            def get(self, timeout: float | None = None) -> tuple[bytes, Any]:
                value = client.values[min(client.reads, len(client.values) - 1)]
                client.reads += 1
                if watch is not None and client.reads < len(client.values):
                    watch(WatchedEvent("CHANGED", "CONNECTED", path))
                return value, SimpleNamespace(version=client.reads - 1)

        return Result()


def store_over(client: object, kick: Callable[[], None] = lambda: None) -> LeaderViews:
    return LeaderViews(client, "/laminar/cache", 60.0, None, kick)  # type: ignore[arg-type]


def test_a_read_whose_watch_already_fired_is_not_cached() -> None:
    client = ChangesRightAfterEachRead([b"PENDING", b"header"])
    kicks: list[None] = []
    store = store_over(client, lambda: kicks.append(None))
    assert store._cached_reads(["/p/ack"]) == {"/p/ack": (b"PENDING", 0)}  # this pass sees the old value
    assert kicks  # and the leader is woken for another pass
    assert store._cached_reads(["/p/ack"]) == {"/p/ack": (b"header", 1)}  # which reads the node again


def test_a_read_with_no_change_after_it_is_cached() -> None:
    client = ChangesRightAfterEachRead([b"header"])
    store = store_over(client)
    assert store._cached_reads(["/p/ack"]) == {"/p/ack": (b"header", 0)}
    assert store._cached_reads(["/p/ack"]) == {"/p/ack": (b"header", 0)}
    assert client.reads == 1


def test_an_ack_is_decoded_once_per_content_and_only_this_passs_paths_stay_cached(
    monkeypatch: Any,
) -> None:
    from laminar_kafka.coordinator.values import EpochAck

    store = store_over(ChangesRightAfterEachRead([b""]))
    first = EpochAck(1, "b1", 4, 2, {"src": {"t:0": 5}}).to_json()
    second = EpochAck(2, "b2", 4, 2, {"src": {"t:1": 7}}).to_json()
    decodes: list[bytes] = []
    real = EpochAck.from_json.__func__  # type: ignore[attr-defined]

    def counting(cls: type[EpochAck], raw: bytes) -> EpochAck:
        decodes.append(raw)
        return real(cls, raw)

    monkeypatch.setattr(EpochAck, "from_json", classmethod(counting))
    acks = store._decode_acks({"/e/1": first, "/e/2": second})
    assert [a.node_id for a in acks] == [1, 2] and len(decodes) == 2
    assert store._decode_acks({"/e/1": first, "/e/2": second}) == acks and len(decodes) == 2  # cached
    replaced = EpochAck(1, "b1", 4, 2, {"src": {"t:0": 6}}).to_json()
    assert store._decode_acks({"/e/1": replaced})[0].cursors == {"src": {"t:0": 6}}  # new content: decoded
    assert len(decodes) == 3 and set(store._decoded_acks) == {"/e/1"}  # /e/2 left the pass: dropped
    assert store._decode_acks({"/e/1": b"{not json"}) == []  # malformed: left out, not cached
    assert store._decoded_acks == {}


class ExistsRecorder:
    def __init__(self) -> None:
        self.watched: list[str] = []

    def exists(self, path: str, watch: Callable[[WatchedEvent], None] | None = None) -> None:
        self.watched.append(path)


def test_a_malformed_or_missing_epoch_ask_reads_as_none_and_a_missing_one_is_watched_once(caplog: Any) -> None:
    """A state fault: the ``epoch_wanted`` node written by hand or half restored. The leader reads
    no ask (the quiet interval still bounds the wait) and says so; a missing node gets one watch for
    its creation, not one per pass."""
    client = ExistsRecorder()
    views = store_over(client)
    assert views._epoch_wanted((b"7", 0), "/w") == 7
    with caplog.at_level("WARNING"):
        assert views._epoch_wanted((b"not-an-epoch", 1), "/w") == 0
    assert "malformed epoch_wanted" in caplog.text
    assert views._epoch_wanted(None, "/w") == 0 and views._epoch_wanted(None, "/w") == 0
    assert client.watched == ["/w"]
    views.clear_cache()  # a reconnect may have lost the watch: armed again
    assert views._epoch_wanted(None, "/w") == 0 and client.watched == ["/w", "/w"]
