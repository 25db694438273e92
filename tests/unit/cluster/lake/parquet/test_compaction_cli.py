"""`laminar-kafka compact` on a Parquet tree through the command line (no servers): one pass, JSON,
the grace a one-off run waits out, `--every` until SIGTERM with a failing pass, the refusals (an
object store, a filesystem without an atomic exchange, bad values) and which format it picks."""
from __future__ import annotations

import argparse
import ctypes
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from laminar_kafka.cli import lake as lake_cli
from laminar_kafka.cli.main import main
from laminar_kafka.cluster.lake.parquet import exchange as exchange_module
from laminar_kafka.cluster.lake.settings import TableFormat
from tests.unit.cluster.lake.parquet.compaction_trees import MIB, TOPIC, Tree, work_dirs


def settled_tree(tmp_path: Path, epochs: int = 8, keep_from: int = 7) -> Tree:
    tree = Tree(tmp_path)
    tree.land(epochs)
    tree.keep_records_from(keep_from)
    return tree


def compact(tree: Tree, *more: str) -> list[str]:
    return ["compact", "--output", tree.root, "--topic", TOPIC, "--target-file-bytes", str(MIB), *more]


def test_one_pass_prints_each_directory_and_leaves_no_leftover(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = settled_tree(tmp_path)
    assert main(compact(tree, "--grace", "0")) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(f": 16 -> 5 files, {out[0].split(', ')[1]}") and "bytes rewritten" in out[0]
    assert out[-1].startswith("orders: 1 leaf directory, 1 rewritten: 16 -> 5 files")
    assert tree.rows() == tree.expected() and len(tree.published()) == 5 and work_dirs(tree) == []


def test_json_and_a_one_off_run_waits_out_the_grace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = settled_tree(tmp_path)
    started = time.monotonic()
    assert main(compact(tree, "--grace", "0.5", "--json", "--codec", "snappy")) == 0
    assert time.monotonic() - started >= 0.5
    body = json.loads(capsys.readouterr().out)
    assert (body["format"], body["files_before"], body["files_after"]) == ("parquet", 16, 5)
    assert (body["leftovers_deleted"], body["leftovers_kept"]) == (1, 0) and work_dirs(tree) == []
    (output,) = body["directories"][0]["outputs"]
    import pyarrow.parquet as pq

    metadata = pq.read_metadata(Path(tree.root, body["directories"][0]["directory"], output))
    assert metadata.row_group(0).column(0).compression == "SNAPPY"


def test_a_topic_without_a_directory_is_refused_naming_the_ones_there(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A mistyped topic would compact nothing, pass after pass, and exit 0."""
    tree = settled_tree(tmp_path)
    assert main(["compact", "--output", tree.root, "--topic", "ordres", "--grace", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: no directory for topic(s) ordres under {tree.root} (topics there: {TOPIC})"


@pytest.mark.parametrize("output", ["s3://bucket/lake", "gs://bucket/lake"])
def test_an_object_store_is_refused_in_one_line(output: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compact", "--output", output, "--topic", TOPIC]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: compact cannot rewrite a Parquet tree on ") and "table-format=iceberg" in err
    assert len(err.splitlines()) == 1


def test_a_filesystem_without_an_atomic_exchange_is_refused_before_anything_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    tree = settled_tree(tmp_path)
    before = sorted(tree.published())

    def no_exchange(*_args: object) -> int:
        ctypes.set_errno(errno.EINVAL)
        return -1

    monkeypatch.setattr(exchange_module, "_renameat2", lambda: no_exchange)
    assert main(compact(tree)) == 2
    err = capsys.readouterr().err
    assert "cannot exchange two directories atomically" in err and f"({exchange_module.filesystem_of(tree.root)})" in err
    assert sorted(tree.published()) == before and work_dirs(tree) == []


@pytest.mark.parametrize("flags, message", [
    (["--target-file-bytes", "1000"], "--target-file-bytes must be between 1048576"),
    (["--grace", "-1"], "--grace must be >= 0"),
    (["--every", "-1"], "--every must be >= 0"),
    (["--retain-last", "0"], "--retain-last must be >= 1"),
])
def test_bad_values_are_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str],
                                     message: str) -> None:
    tree = settled_tree(tmp_path)
    assert main([*compact(tree), *flags]) == 2
    assert message in capsys.readouterr().err


def test_an_unknown_codec_is_refused_by_the_parser(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compact", "--output", str(tmp_path), "--topic", TOPIC, "--codec", "brotli"]) == 2
    assert "invalid choice: 'brotli'" in capsys.readouterr().err


def args_of(output: Path, *flags: str) -> argparse.Namespace:
    values: dict[str, object] = {"output": str(output), "topic": [TOPIC], "config": None, "table_format": None,
                                 "catalog_uri": None, "namespace": None, "table": None}
    values.update(zip(flags[::2], flags[1::2], strict=True))
    return argparse.Namespace(**values)


def test_the_format_is_the_given_one_else_what_the_output_holds(tmp_path: Path) -> None:
    detect = lake_cli._compact_format
    assert detect(args_of(tmp_path), {}) is TableFormat.PARQUET
    (tmp_path / TOPIC / "metadata").mkdir(parents=True)
    assert detect(args_of(tmp_path), {}) is TableFormat.ICEBERG  # the topic's Iceberg table
    assert detect(args_of(tmp_path, "table_format", "parquet"), {}) is TableFormat.PARQUET  # the flag wins
    assert detect(args_of(tmp_path), {"LAMINAR_TABLE_FORMAT": "parquet"}) is TableFormat.PARQUET
    other = tmp_path / "other"
    (other / "_catalog").mkdir(parents=True)
    assert detect(args_of(other), {}) is TableFormat.ICEBERG  # the embedded catalog
    assert detect(args_of(tmp_path / "plain"), {"LAMINAR_CATALOG_URI": "http://catalog:8181"}) is TableFormat.ICEBERG
    config = tmp_path / "node.toml"
    config.write_text('table-format = "parquet"\n')
    assert detect(args_of(tmp_path, "config", str(config)), {}) is TableFormat.PARQUET
    assert detect(argparse.Namespace(**{**vars(args_of(tmp_path)), "output": f"file://{tmp_path}"}), {}) is TableFormat.ICEBERG
    assert detect(args_of(Path("s3:/bucket")), {}) is TableFormat.PARQUET  # then refused: no exchange there


def compact_process(tree: Tree, *more: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "laminar_kafka.cli.main", *compact(tree, *more)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_every_runs_passes_until_sigterm_and_a_failed_pass_is_one_line(tmp_path: Path) -> None:
    tree = settled_tree(tmp_path)
    broken = Path(tree.root, sorted(tree.files[1])[0])
    content = broken.read_bytes()
    broken.write_bytes(content[:-20])  # a torn footer: every pass fails, naming it
    process = compact_process(tree, "--every", "0.2", "--grace", "0")
    seen: list[str] = []
    try:
        assert process.stderr is not None
        for line in process.stderr:  # each failure's line is flushed as it is printed
            seen.append(line)
            if sum(printed.startswith("compaction pass failed") for printed in seen) >= 2:
                break
        broken.write_bytes(content)  # repaired: the next pass compacts
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(os.path.basename(f).startswith("epochs-") for f in tree.published()):
            time.sleep(0.1)
    finally:
        process.send_signal(signal.SIGTERM)
        out, rest = process.communicate(timeout=30)
    err = "".join(seen) + rest
    assert process.returncode == 0, err
    failures = [line for line in err.splitlines() if line.startswith("compaction pass failed (next in 0.2 s): ")]
    assert len(failures) >= 2 and all(str(broken) in line for line in failures), err
    assert "Traceback" not in err
    assert "16 -> 5 files" in out and tree.rows() == tree.expected()


def iceberg_lake(tmp_path: Path) -> str:
    """An Iceberg table `pipe.orders` on the embedded catalog under the output: 2 epochs of 4 small files."""
    from tests.unit.cluster.iceberg_fakes import DAY_1, DAY_2, Lake, rows

    lake = Lake(tmp_path)
    output = lake.output()
    for epoch in (1, 2):
        for node, when in ((1, DAY_1), (2, DAY_2)):
            base = epoch * 100 + node * 10
            lake.stage(epoch, rows("orders", node, range(base, base + 3), when=when), node=node)
            lake.stage(epoch, rows("orders", node + 2, range(base, base + 2), when=when), node=node)
        lake.publish(output, epoch)
    return lake.root


def test_an_iceberg_lake_is_compacted_as_iceberg_without_being_told_with_the_codec(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow.parquet as pq

    from laminar_kafka.cluster.lake.iceberg.tables import open_catalog
    from laminar_kafka.cluster.lake.parquet.sink import open_output
    from laminar_kafka.cluster.lake.settings import IcebergSettings

    root = iceberg_lake(tmp_path)
    assert main(["compact", "--output", root, "--pipeline", "pipe", "--topic", "orders", "--codec", "gzip",
                 "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["table"] == "pipe.orders" and body["compact"]["files_before"] == 8 and body["compact"]["files_after"] == 2
    fs, _ = open_output(root)
    table = open_catalog(IcebergSettings(namespace="pipe"), fs, root).load_table(("pipe", "orders"))
    for task in table.scan().plan_files():
        assert pq.read_metadata(task.file.file_path).row_group(0).column(0).compression == "GZIP"
    assert not Path(root, "_laminar", "compact").exists()  # nothing of the Parquet compaction ran


def test_every_on_an_iceberg_lake_until_sigterm(tmp_path: Path) -> None:
    root = iceberg_lake(tmp_path)
    # unbuffered, so each pass's line arrives as it is printed: SIGTERM follows the second pass (the
    # handler is in place before the first), however long the interpreter took to start
    with (tmp_path / "stderr").open("w+") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "laminar_kafka.cli.main", "compact", "--output", root,
                                    "--pipeline", "pipe", "--topic", "orders", "--every", "0.2"],
                                   stdout=subprocess.PIPE, stderr=stderr, text=True,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})
        seen: list[str] = []
        try:
            assert process.stdout is not None
            for line in process.stdout:
                seen.append(line)
                if sum(printed.startswith("pipe.orders: ") for printed in seen) >= 2:
                    break
        finally:
            process.send_signal(signal.SIGTERM)
            rest, _ = process.communicate(timeout=30)
        out = "".join(seen) + rest
        stderr.seek(0)
        err = stderr.read()
    assert process.returncode == 0 and "Traceback" not in err, err
    passes = [line for line in out.splitlines() if line.startswith("pipe.orders: ")]
    assert len(passes) >= 2 and "'files_before': 8, 'files_after': 2" in passes[0], out
    assert "'files_before': 2, 'files_after': 2" in passes[-1]  # nothing left to do
