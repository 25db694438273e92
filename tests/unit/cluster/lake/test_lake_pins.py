"""The pinned settings the lake keeps (``_laminar/pins/<pipeline>.json``): compared before the
coordinator's pins, written once they agree, strict to read."""
from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs
import pytest

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.lake_pins import LAKE_PINNED_SETTINGS, LakePins, decode, encode, lake_pins_path
from laminar_kafka.coordinator.errors import CodecError
from laminar_kafka.errors import ConfigurationError

VALUES = {"topic": "orders", "output": "/lake", "table-format": "parquet", "partition-by": "day", "format": "raw",
          "vnode-count": "256", "source-identity": "kafka"}


def pins(tmp_path: Path, **changed: str) -> LakePins:
    values = {**VALUES, **{k.replace("_", "-"): v for k, v in changed.items()}}
    return LakePins(pafs.LocalFileSystem(), str(tmp_path), "orders", values)


def test_nothing_kept_is_no_mismatch_and_keep_writes_the_values_once(tmp_path: Path) -> None:
    first = pins(tmp_path)
    first.check(None)  # type: ignore[arg-type]
    assert not (tmp_path / lake_pins_path("orders")).exists()
    first.keep(None)  # type: ignore[arg-type]
    assert first.read() == {name: VALUES[name] for name in LAKE_PINNED_SETTINGS}
    written = (tmp_path / lake_pins_path("orders")).read_bytes()
    pins(tmp_path, partition_by="hour").keep(None)  # type: ignore[arg-type]  # kept: never overwritten
    assert (tmp_path / lake_pins_path("orders")).read_bytes() == written
    assert not [p for p in (tmp_path / "_laminar" / "pins").iterdir() if p.name.endswith(".tmp")]


def test_a_drifted_setting_is_refused_in_one_line_naming_where_it_is_kept(tmp_path: Path) -> None:
    pins(tmp_path).keep(None)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError) as refused:
        pins(tmp_path, partition_by="hour", format="json").check(None)  # type: ignore[arg-type]
    assert str(refused.value) == ("setting partition-by is hour here, but pipeline orders was created with day "
                                  "(kept in its lake); start this node with --partition-by day "
                                  "(also differing: format)")


def test_output_and_vnode_count_are_not_kept(tmp_path: Path) -> None:
    pins(tmp_path).keep(None)  # type: ignore[arg-type]
    pins(tmp_path, output="/elsewhere", vnode_count="64").check(None)  # type: ignore[arg-type]


def test_the_file_is_strict(tmp_path: Path) -> None:
    raw = encode("orders", VALUES)
    assert decode(raw, "x") == ("orders", {name: VALUES[name] for name in LAKE_PINNED_SETTINGS})
    for bad in (raw.replace(b'"format_version":1', b'"format_version":2'), raw.replace(b'"topic"', b'"topics"'),
                b"{", raw[:-1] + b',"extra":1}'):
        with pytest.raises(CodecError):
            decode(bad, "x")
    path = tmp_path / lake_pins_path("orders")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not json")
    with pytest.raises(SinkError, match="pins .*orders.json"):
        pins(tmp_path).check(None)  # type: ignore[arg-type]
    path.write_bytes(encode("other", VALUES))
    with pytest.raises(SinkError, match="are pipeline other's, not orders's"):
        pins(tmp_path).check(None)  # type: ignore[arg-type]


def test_the_routing_settings_are_kept_and_a_file_without_them_still_reads(tmp_path: Path) -> None:
    routed = {"table_template": "ev_{field:region}", "table_topic_regex": "", "table_allowed": "ev_.*"}
    pins(tmp_path, **routed).keep(None)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="^setting table-template is {topic} here, but pipeline orders was "
                                                 r"created with ev_\{field:region\} \(kept in its lake\)"):
        pins(tmp_path, **{**routed, "table_template": "{topic}"}).check(None)  # type: ignore[arg-type]
    older = tmp_path / "older"
    pins(older).keep(None)  # type: ignore[arg-type]  # a node without the routing settings: a file without them
    assert "table-template" not in (older / lake_pins_path("orders")).read_text()
    pins(older, **routed).check(None)  # type: ignore[arg-type]  # absent: not compared


def test_upsert_keys_are_kept_and_a_file_without_them_still_reads(tmp_path: Path) -> None:
    pins(tmp_path, upsert_keys="id").keep(None)  # type: ignore[arg-type]
    assert pins(tmp_path).read() == {**{name: VALUES[name] for name in LAKE_PINNED_SETTINGS}, "upsert-keys": "id"}
    with pytest.raises(ConfigurationError, match="^setting upsert-keys is id,tenant here, but pipeline orders was "
                                                 r"created with id \(kept in its lake\)"):
        pins(tmp_path, upsert_keys="id,tenant").check(None)  # type: ignore[arg-type]
    older = tmp_path / "older"
    pins(older).keep(None)  # type: ignore[arg-type]  # a node before upsert-keys was kept: a file without it
    assert "upsert-keys" not in (older / lake_pins_path("orders")).read_text()
    pins(older, upsert_keys="id").check(None)  # type: ignore[arg-type]  # absent: not compared
