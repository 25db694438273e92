"""`verify --watch` beside a running node: the audit follows the pipeline pass by pass (its metrics at
the topic's ends, nothing missing or duplicated), then sees the lake corrupted on purpose: a copied
file moves `laminar_audit_duplicated` by its rows, a deleted one `laminar_audit_missing` (after a
full audit), each with one log line; the command ends 1 (not exact) on SIGTERM."""
from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from laminar_kafka.demo import wait_caught_up
from laminar_kafka.devstack.processes import NodeProcess, free_port
from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.devstack.waiting import wait_until
from tests import support
from tests.conftest import KafkaHandle

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def audit_metrics(port: int) -> dict[str, float]:
    """The audit's samples by name with labels (``name{labels}`` -> value)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith("laminar_audit"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def sample(port: int, name: str, topic: str) -> float:
    try:
        return audit_metrics(port).get(f'{name}{{topic="{topic}"}}', -1.0)
    except OSError:
        return -1.0


def marks(port: int, topic: str) -> float:
    try:
        return sum(v for k, v in audit_metrics(port).items() if k.startswith('laminar_audit_high_water{partition="')
                   and f'topic="{topic}"' in k)
    except OSError:
        return -1.0


def test_verify_watch_follows_the_pipeline_and_sees_a_copied_and_a_deleted_file(
    kafka: KafkaHandle, unique: Callable[[str], str], tmp_path: Path,
) -> None:
    topic = unique("audit")
    create_topic(kafka.bootstrap, topic, 3)
    support.produce(kafka.bootstrap, topic, [b"v%d" % i for i in range(1500)])
    output = tmp_path / "out"
    node = NodeProcess.launch(1, bootstrap=kafka.bootstrap, topic=topic, output=str(output), zk=None, pipeline="p",
                              log_dir=tmp_path, extra=["--checkpoint-interval-ms", "300"])
    port = free_port()
    log = tmp_path / "watch.log"
    with open(log, "wb") as handle:
        watch = subprocess.Popen(
            [sys.executable, "-m", "laminar_kafka.cli.main", "verify", "--output", str(output), "--bootstrap",
             kafka.bootstrap, "--topic", topic, "--pipeline", "p", "--watch", "0.5", "--metrics-port", str(port)],
            stdout=handle, stderr=subprocess.STDOUT)
    try:
        assert wait_caught_up(kafka.bootstrap, topic, str(output), 60).ok
        wait_until(lambda: marks(port, topic) == 1500, 60, "the audit's marks at the topic's ends (1,500)")
        wrong = subprocess.run(  # a wrong --pipeline would audit nothing, forever: one line, exit 2
            [sys.executable, "-m", "laminar_kafka.cli.main", "verify", "--output", str(output), "--bootstrap",
             kafka.bootstrap, "--topic", topic, "--pipeline", "q", "--watch", "0.5"], capture_output=True, text=True,
            timeout=60)
        assert wrong.returncode == 2 and "records pipeline(s) p, not 'q': is --pipeline right?" in wrong.stderr, wrong
        assert sample(port, "laminar_audit_missing", topic) == 0 and sample(port, "laminar_audit_duplicated", topic) == 0

        support.produce(kafka.bootstrap, topic, [b"w%d" % i for i in range(900)])  # the audit follows
        wait_until(lambda: marks(port, topic) == 2400, 60, "the audit's marks at the new ends (2,400)")
        assert sample(port, "laminar_audit_missing", topic) == 0 and sample(port, "laminar_audit_duplicated", topic) == 0
        passes = audit_metrics(port)["laminar_audit_passes_total"]
        assert passes >= 2

        files = sorted((output / topic).rglob("epoch-*.parquet"))
        copied, deleted = files[0], files[-1]
        copied_rows, deleted_rows = pq.read_metadata(copied).num_rows, pq.read_metadata(deleted).num_rows
        shutil.copy(copied, copied.with_name("copy-of-" + copied.name))  # a readable, published name
        wait_until(lambda: sample(port, "laminar_audit_duplicated", topic) == copied_rows, 30,
                   f"laminar_audit_duplicated at the copied file's {copied_rows} rows")
        assert sample(port, "laminar_audit_missing", topic) == 0

        deleted.unlink()
        wait_until(lambda: sample(port, "laminar_audit_missing", topic) == deleted_rows, 30,
                   f"laminar_audit_missing at the deleted file's {deleted_rows} rows")
        assert sample(port, "laminar_audit_duplicated", topic) == copied_rows  # the full audit still sees the copy
        assert audit_metrics(port)[f'laminar_audit_full_audits_total{{topic="{topic}"}}'] == 1
    finally:
        node.stop()
        watch.send_signal(signal.SIGTERM)
        code = watch.wait(30)
    text = log.read_text()
    assert code == 1, text  # the last pass was not exact
    assert f"audit of {topic}: {copied_rows} record(s) duplicated" in text
    assert f"audit of {topic}: {deleted_rows} record(s) missing" in text
    assert text.count("record(s) duplicated") == 1 and text.count("record(s) missing") == 1  # one line each
    assert "pass " in text and "Traceback" not in text


def test_verify_watch_on_iceberg_stays_exact_through_compaction_and_sees_a_file_listed_twice(
    kafka: KafkaHandle, unique: Callable[[str], str], tmp_path: Path,
) -> None:
    """Compaction rewrites the table's files under the watch (a full audit, still exact); a data file
    added to the table a second time moves `laminar_audit_duplicated` by its rows."""
    from tests.integration.cluster.test_iceberg_cli import _table

    topic = unique("audit-ice")
    create_topic(kafka.bootstrap, topic, 3)
    support.produce(kafka.bootstrap, topic, [b"v%d" % i for i in range(1200)])
    output = tmp_path / "out"
    node = NodeProcess.launch(1, bootstrap=kafka.bootstrap, topic=topic, output=str(output), zk=None, pipeline="p",
                              log_dir=tmp_path, extra=["--checkpoint-interval-ms", "300", "--table-format", "iceberg"])
    port = free_port()
    log = tmp_path / "watch.log"
    with open(log, "wb") as handle:
        watch = subprocess.Popen(
            [sys.executable, "-m", "laminar_kafka.cli.main", "verify", "--output", str(output), "--bootstrap",
             kafka.bootstrap, "--topic", topic, "--pipeline", "p", "--table-format", "iceberg", "--watch", "0.5",
             "--metrics-port", str(port)], stdout=handle, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: marks(port, topic) == 1200, 90, "the audit's marks at the topic's ends (1,200)")
        support.produce(kafka.bootstrap, topic, [b"w%d" % i for i in range(600)])
        wait_until(lambda: marks(port, topic) == 1800, 60, "the audit's marks at the new ends (1,800)")
        compact = subprocess.run(
            [sys.executable, "-m", "laminar_kafka.cli.main", "compact", "--output", str(output), "--pipeline", "p",
             "--topic", topic, "--expire-after", "0"], capture_output=True, text=True, timeout=120)
        assert compact.returncode == 0, compact.stderr
        full = f'laminar_audit_full_audits_total{{topic="{topic}"}}'
        wait_until(lambda: audit_metrics(port).get(full, 0) >= 1, 30, "a full audit after the compaction")
        assert sample(port, "laminar_audit_missing", topic) == 0 and sample(port, "laminar_audit_duplicated", topic) == 0

        table = _table(str(output), "p", topic.replace("-", "_").replace(".", "_"))
        path = next(iter(table.scan().plan_files())).file.file_path
        rows = pq.read_metadata(path).num_rows
        table.add_files([path], check_duplicate_files=False)  # the same data file listed twice
        wait_until(lambda: sample(port, "laminar_audit_duplicated", topic) == rows, 30,
                   f"laminar_audit_duplicated at the twice-listed file's {rows} rows")
        assert sample(port, "laminar_audit_missing", topic) == 0
    finally:
        node.stop()
        watch.send_signal(signal.SIGTERM)
        code = watch.wait(30)
    text = log.read_text()
    assert code == 1 and f"audit of {topic}: {rows} record(s) duplicated" in text, text
    assert "Traceback" not in text
