"""The pure plan of a Parquet tree compaction: which files, which bins, what a leftover is."""
from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laminar_kafka.cluster.errors import UsageError
from laminar_kafka.cluster.lake.parquet.compaction_plan import (
    Codec,
    CompactionSettings,
    DataFile,
    DirectoryPlan,
    Entry,
    FileEpochs,
    LeftoverKind,
    WorkDirectory,
    classify_leftover,
    epochs_of,
    is_candidate,
    links_for_exchange,
    output_name,
    plan_cleanup,
    plan_directory,
    strays_after_exchange,
)

ID = "0123456789abcdef"
OTHER_ID = "fedcba9876543210"
DIR = "orders/dt=2024-01-01"
MIB = 1024 * 1024
SETTINGS = CompactionSettings(target_file_bytes=MIB)


def published(epoch: int, node: int = 1, seq: int = 1) -> str:
    return f"epoch-{epoch:010d}.node-{node}.boot-b0.seq-{seq:08d}.parquet"


def plan(files: list[DataFile], oldest: int | None = 100, protected: frozenset[str] = frozenset(),
         settings: CompactionSettings = SETTINGS, directory: str = DIR) -> DirectoryPlan:
    return plan_directory(directory, files, oldest_record_epoch=oldest, protected=protected, settings=settings,
                          compact_id=ID)


# ---- names -------------------------------------------------------------------------------------------------


def test_epochs_of_reads_the_sinks_and_the_compactions_names() -> None:
    assert epochs_of(published(42, node=3, seq=7)) == FileEpochs(42, 42)
    assert epochs_of(output_name(3, 42, ID, 0)) == FileEpochs(3, 42, ID)
    assert output_name(3, 42, ID, 2) == f"epochs-0000000003-0000000042.compact-{ID}-2.parquet"
    for other in ("copy-of-" + published(1), published(1) + ".tmp", "epoch-0000000000.node-1.boot-b.seq-00000001.parquet",
                  "open.node-1.boot-b.seq-00000001.parquet", "rejected.epoch-0000000001.node-1.boot-b.seq-00000001.parquet",
                  f"epochs-0000000009-0000000003.compact-{ID}-0.parquet", f"epochs-1-2.compact-{ID}-0.parquet",
                  "epochs-0000000001-0000000002.compact-XYZ-0.parquet", "part-0.parquet", ""):
        assert epochs_of(other) is None, other


@pytest.mark.parametrize("parts", [(0, 1, ID, 0), (2, 1, ID, 0), (1, 2, "short", 0), (1, 2, ID, -1), (1, 2, ID.upper(), 0)])
def test_output_name_refuses_bad_parts(parts: tuple[int, int, str, int]) -> None:
    with pytest.raises(ValueError):
        output_name(*parts)


# ---- settings ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, codec", [("zstd", Codec.ZSTD), ("SNAPPY", Codec.SNAPPY), (" gzip ", Codec.GZIP),
                                          ("lz4", Codec.LZ4), ("none", Codec.NONE)])
def test_codec_parse(text: str, codec: Codec) -> None:
    assert Codec.parse(text) is codec


def test_codec_parse_names_the_choices() -> None:
    with pytest.raises(UsageError, match="codec 'brotli2': expected one of zstd, snappy, gzip, lz4, none"):
        Codec.parse("brotli2")


@pytest.mark.parametrize("kwargs, message", [
    ({"target_file_bytes": MIB - 1}, "--target-file-bytes must be between 1048576"),
    ({"target_file_bytes": 64 * 1024 ** 3 + 1}, "--target-file-bytes must be between"),
    ({"grace_s": -1.0}, "--grace must be >= 0"),
    ({"grace_s": float("nan")}, "--grace must be >= 0"),
    ({"min_input_files": 1}, "min_input_files must be >= 2"),
])
def test_settings_refuse_values_out_of_range(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        CompactionSettings(**kwargs)  # type: ignore[arg-type]


def test_settings_defaults() -> None:
    default = CompactionSettings()
    assert (default.target_file_bytes, default.codec, default.grace_s) == (128 * MIB, Codec.ZSTD, 60.0)


# ---- candidates and bins -----------------------------------------------------------------------------------


def test_only_small_files_of_settled_epochs_that_no_record_lists_are_candidates() -> None:
    def candidate(name: str, size: int = 10, oldest: int | None = 50, protected: frozenset[str] = frozenset()) -> bool:
        return is_candidate(name, size, DIR, oldest_record_epoch=oldest, protected=protected, target_file_bytes=MIB)

    assert candidate(published(49))
    assert not candidate(published(50))  # the oldest kept record's epoch: listed, must never move
    assert not candidate(published(51))
    assert not candidate(published(1), oldest=None)  # no record: no epoch is known settled
    assert not candidate(published(1), size=MIB)  # not smaller than the target
    assert candidate(published(1), size=MIB - 1)
    assert not candidate(published(1), protected=frozenset({f"{DIR}/{published(1)}"}))
    assert candidate(published(1), protected=frozenset({f"other/{published(1)}"}))
    assert candidate(output_name(1, 49, ID, 0)) and not candidate(output_name(1, 50, ID, 0))
    assert not candidate("copy-of-" + published(1))  # a name that says no epoch: left alone
    assert is_candidate(published(1), 10, "", oldest_record_epoch=5, protected=frozenset({published(1)}),
                        target_file_bytes=MIB) is False  # the root directory: paths without a prefix


def test_bins_pack_consecutive_epochs_up_to_the_target_and_drop_single_files() -> None:
    sizes = [400_000, 400_000, 400_000, 300_000, 900_000, 50_000]
    files = [DataFile(published(e + 1), size, "s") for e, size in enumerate(sizes)]
    result = plan(files)
    assert [b.inputs for b in result.bins] == [
        (published(1), published(2)),  # 800,000; with the third it would pass 1 MiB
        (published(3), published(4)),  # 700,000
        # 900,000 + 50,000 = 950,000 fits
        (published(5), published(6)),
    ]
    assert [b.output for b in result.bins] == [output_name(1, 2, ID, 0), output_name(3, 4, ID, 1), output_name(5, 6, ID, 2)]
    assert result.files == 6 and result.files_after == 3 and result.input_bytes == sum(sizes)
    assert result.last_epoch == 6 and result.compact_id == ID

    lonely = plan([DataFile(published(1), 900_000, "s"), DataFile(published(2), 900_000, "s")])
    assert lonely.bins == ()  # each alone in its bin: nothing to gain
    assert lonely.files_after == 2 and lonely.last_epoch == 0


def test_bins_hold_one_schema_each_and_files_without_a_schema_key_stay() -> None:
    files = [DataFile(published(1), 10, "a"), DataFile(published(2), 10, "b"), DataFile(published(3), 10, "a"),
             DataFile(published(4), 10, "b"), DataFile(published(5), 10, None)]
    result = plan(files)
    assert sorted(b.inputs for b in result.bins) == [(published(1), published(3)), (published(2), published(4))]
    assert published(5) not in result.inputs


def test_epoch_order_not_name_order_and_earlier_outputs_are_inputs_again() -> None:
    earlier = output_name(1, 10, OTHER_ID, 0)
    files = [DataFile(published(12, node=2), 10, "s"), DataFile(earlier, 500_000, "s"), DataFile(published(11), 10, "s")]
    (only,) = plan(files).bins
    assert only.inputs == (earlier, published(11), published(12, node=2))
    assert only.output == output_name(1, 12, ID, 0)


def test_a_plan_never_names_an_output_like_an_existing_file() -> None:
    taken = output_name(1, 2, ID, 0)
    with pytest.raises(ValueError, match="already exists"):
        plan([DataFile(published(1), 10, "s"), DataFile(published(2), 10, "s"), DataFile(taken, MIB, "s")])
    with pytest.raises(ValueError, match="bad compaction id"):
        plan_directory(DIR, [], oldest_record_epoch=1, protected=frozenset(), settings=SETTINGS, compact_id="x")


files_strategy = st.lists(
    st.tuples(st.integers(1, 40), st.integers(1, 3), st.integers(0, 2 * MIB), st.sampled_from(["a", "b", None]),
              st.booleans(), st.booleans()),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(files_strategy, st.one_of(st.none(), st.integers(1, 45)), st.integers(MIB, 3 * MIB), st.integers(2, 4))
def test_plan_properties(raw: list[tuple[int, int, int, str | None, bool, bool]], oldest: int | None, target: int,
                         minimum: int) -> None:
    files, protected, seen = [], set(), set()
    for seq, (epoch, node, size, schema, compacted, listed) in enumerate(raw):
        name = output_name(max(1, epoch - 3), epoch, OTHER_ID, seq) if compacted else published(epoch, node, seq)
        if name in seen:
            continue
        seen.add(name)
        files.append(DataFile(name, size, schema))
        if listed:
            protected.add(f"{DIR}/{name}")
    options = CompactionSettings(target_file_bytes=target, min_input_files=minimum)
    result = plan(files, oldest, frozenset(protected), options)
    by_name = {f.name: f for f in files}
    inputs = [name for b in result.bins for name in b.inputs]
    assert len(inputs) == len(set(inputs))  # disjoint bins
    for b in result.bins:
        assert len(b.inputs) >= minimum
        assert b.input_bytes == sum(by_name[n].size for n in b.inputs) <= target
        assert len({by_name[n].schema for n in b.inputs}) == 1 and by_name[b.inputs[0]].schema is not None
        epochs = [epochs_of(n) for n in b.inputs]
        assert all(e is not None for e in epochs)
        out = epochs_of(b.output)
        assert out == FileEpochs(min(e.first for e in epochs if e), max(e.last for e in epochs if e), ID)
        assert b.output not in by_name
    for name in inputs:
        assert is_candidate(name, by_name[name].size, DIR, oldest_record_epoch=oldest, protected=frozenset(protected),
                            target_file_bytes=target)
        assert oldest is not None and epochs_of(name).last < oldest  # type: ignore[union-attr]
        assert f"{DIR}/{name}" not in protected
    assert len(set(result.outputs)) == len(result.outputs)
    assert result.files_after == len(files) - len(inputs) + len(result.bins)


# ---- the exchange ------------------------------------------------------------------------------------------


def two_bins() -> DirectoryPlan:
    p = plan([DataFile(published(e), 500_000, "s") for e in range(1, 5)])
    assert len(p.bins) == 2
    return p


def test_links_are_every_entry_but_the_inputs_including_files_published_meanwhile() -> None:
    p = two_bins()
    live = [Entry(published(e)) for e in range(1, 5)] + [Entry(published(200)), Entry("copy-of-x.parquet"), Entry(".hidden")]
    links, problem = links_for_exchange(live, p)
    assert problem == "" and links == (".hidden", "copy-of-x.parquet", published(200))


@pytest.mark.parametrize("live, message", [
    ([Entry(published(e)) for e in range(1, 5)] + [Entry("hour=01", is_dir=True)], "it holds subdirectories (hour=01)"),
    ([Entry(published(e)) for e in range(1, 5)] + [Entry("_tmp", is_dir=True)], "it holds subdirectories (_tmp)"),
    ([Entry(published(e)) for e in range(2, 5)], f"input {published(1)} is gone"),
    ([Entry(published(4))], f"input {published(1)} is gone (and 2 more)"),
    ([Entry(published(e)) for e in range(1, 5)] + [Entry(output_name(1, 2, ID, 0))], "output name"),
])
def test_a_directory_that_cannot_be_exchanged_says_why(live: list[Entry], message: str) -> None:
    links, problem = links_for_exchange(live, two_bins())
    assert links == () and message in problem


def test_strays_are_what_neither_an_input_nor_linked() -> None:
    p = two_bins()
    replaced = [published(e) for e in range(1, 5)] + ["linked.parquet", published(300)]
    assert strays_after_exchange(replaced, p, ["linked.parquet"]) == (published(300),)
    assert strays_after_exchange(replaced[:4], p, []) == ()


# ---- leftovers ---------------------------------------------------------------------------------------------


def test_a_leftover_holding_its_own_outputs_was_not_exchanged() -> None:
    assert classify_leftover(ID, [output_name(1, 5, ID, 0), published(9)]) is LeftoverKind.UNSWAPPED
    assert classify_leftover(ID, [output_name(1, 5, ID, 3)]) is LeftoverKind.UNSWAPPED  # killed mid-write
    # the replaced directory: the inputs (an earlier compaction's output among them) and the linked files
    assert classify_leftover(ID, [published(1), output_name(1, 5, OTHER_ID, 0)]) is LeftoverKind.SWAPPED
    assert classify_leftover(ID, []) is LeftoverKind.EMPTY


def test_cleanup_waits_out_the_grace_only_for_replaced_directories() -> None:
    found = [
        WorkDirectory(ID, (published(1),), age_s=10.0),  # replaced, young
        WorkDirectory(OTHER_ID, (output_name(1, 2, OTHER_ID, 0),), age_s=0.0),  # not exchanged: no reader
        WorkDirectory("1111111111111111", (), age_s=0.0),  # empty
        WorkDirectory("2222222222222222", (published(2),), age_s=61.0),  # replaced, old
        WorkDirectory("not-ours", (published(3),), age_s=1e9),  # not a compaction id: left alone
    ]
    result = {c.name: (c.kind, c.delete) for c in plan_cleanup(found, grace_s=60.0)}
    assert result == {
        ID: (LeftoverKind.SWAPPED, False),
        OTHER_ID: (LeftoverKind.UNSWAPPED, True),
        "1111111111111111": (LeftoverKind.EMPTY, True),
        "2222222222222222": (LeftoverKind.SWAPPED, True),
    }
    assert all(c.delete for c in plan_cleanup(found, grace_s=0.0))


@given(st.lists(st.tuples(st.sampled_from([ID, OTHER_ID, "3333333333333333", "bad"]), st.lists(
    st.sampled_from([published(1), output_name(1, 2, ID, 0), output_name(1, 2, OTHER_ID, 0), "x"]), max_size=4),
    st.floats(0, 100)), max_size=6), st.floats(0, 100))
def test_cleanup_properties(raw: list[tuple[str, list[str], float]], grace: float) -> None:
    found = [WorkDirectory(name, tuple(names), age) for name, names, age in raw]
    result = plan_cleanup(found, grace)
    assert Counter(c.name for c in result) == Counter(w.name for w in found if w.name != "bad")
    for cleanup, work in zip(result, sorted((w for w in found if w.name != "bad"), key=lambda w: w.name), strict=True):
        assert cleanup.kind is classify_leftover(work.name, work.names)
        assert cleanup.delete == (cleanup.kind is not LeftoverKind.SWAPPED or work.age_s >= grace)
