"""`laminar-kafka compact` on a Parquet tree beside a running ZooKeeper-mode pipeline and a reader.

Two nodes land an epoch about every 0.3 s (a file sealed epochs need more than RECORDS_KEPT = 100
later epochs before compaction may touch it, so the interval is short to get there in a minute) while
`compact --every 1` runs and two reader threads read the tree: pyarrow.dataset (hive partitioning,
its default ignore prefixes) asserting that no `(_partition, _offset)` is ever seen twice and that
the row count never goes down, and a tight listing of each directory asserting that no epoch is ever
both in a compacted file and another file, or missing. In the end `verify` exits 0, the small files
are fewer, no work directory is left after the grace period, every kept epoch record's files are
there, and the nodes started again reconcile with the lake without seeing a rollback. Then a
compaction SIGKILLed after writing, and one SIGKILLed after its first exchange (the command run by
tests/compaction_fault.py, which kills it there), each leave the tree exact; the next run cleans up
and compacts."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from laminar_kafka.cluster.errors import VerifyError
from laminar_kafka.cluster.lake.parquet.compaction import WORK_DIR
from laminar_kafka.cluster.lake.record import RECORDS_DIR, parse_record_name
from laminar_kafka.cluster.ops.verify import VerifyReport
from laminar_kafka.demo import audit_output
from laminar_kafka.devstack.producers import produce
from tests.compaction_readers import Readers
from tests.integration.cluster.harness import Pipeline

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

CLI = [sys.executable, "-m", "laminar_kafka.cli.main"]
#: runs the command line with its compaction killed at a step (the product has no fault switch)
FAULT_SCRIPT = Path(__file__).resolve().parents[2] / "compaction_fault.py"
#: what a node logs when it finds the lake behind its control state, or with a hole (cluster.lake.reconcile)
ROLLBACK_MARKS = ("the lake is behind", "has a hole", "reseeded", "but shows epoch")
FAST_EPOCHS = ("--checkpoint-interval-ms", "250", "--session-timeout-ms", "4000", "--drain-timeout-ms", "15000")


def record_epochs(output: str) -> list[int]:
    try:
        names = os.listdir(Path(output, RECORDS_DIR))
    except FileNotFoundError:
        return []
    return sorted(e for e in (parse_record_name(n) for n in names) if e is not None)


def data_files(output: str, topic: str) -> list[str]:
    """The published files of ``topic`` (relative to its directory), as a reader lists them."""
    found = []
    for directory, subdirectories, files in os.walk(Path(output, topic)):
        subdirectories[:] = [d for d in subdirectories if not d.startswith(("_", "."))]
        found += [os.path.relpath(Path(directory, f), Path(output, topic)) for f in files if f.endswith(".parquet")]
    return sorted(found)


def work_directories(output: str) -> list[str]:
    base = Path(output, WORK_DIR)
    return sorted(os.listdir(base)) if base.exists() else []


def verify(pipeline: Pipeline) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "verify", "--output", pipeline.output, "--bootstrap", pipeline.bootstrap, "--topic",
                           pipeline.topic, "--pipeline", pipeline.pipeline], capture_output=True, text=True, timeout=180)


def finish_beside_compaction(pipeline: Pipeline, timeout: float = 120.0) -> tuple[VerifyReport, int]:
    """Stop producing and audit until nothing is missing; an audit that listed a file an exchange then
    replaced fails with FileNotFoundError (never a wrong count) and is done again. Returns the last
    report and how many audits lost a file that way."""
    assert pipeline.producer is not None
    pipeline.producer.stop()
    assert pipeline.producer.failed == 0
    last: list[VerifyReport] = []
    lost = [0]

    def exact() -> bool:
        try:
            report = audit_output(pipeline.bootstrap, pipeline.topic, pipeline.output, pipeline.lake)
        except VerifyError as exc:
            if not isinstance(exc.cause, FileNotFoundError):
                raise
            lost[0] += 1
            return False
        last[:] = [report]
        return report.missing == 0

    pipeline.wait_until(exact, timeout, "every record landed")
    return last[0], lost[0]


def compact(pipeline: Pipeline, *more: str) -> list[str]:
    return [*CLI, "compact", "--output", pipeline.output, "--topic", pipeline.topic, "--pipeline", pipeline.pipeline,
            "--target-file-bytes", str(1024 * 1024), *more]


def assert_records_whole(output: str) -> set[str]:
    """Every file every kept epoch record lists is there (what a node checks at start); returns them
    (relative to the output)."""
    listed = []
    for epoch in record_epochs(output):
        listed += json.loads(Path(output, RECORDS_DIR, f"epoch-{epoch:010d}.json").read_text())["files"]
    missing = [f for f in listed if not Path(output, f).is_file()]
    assert missing == [], f"files of kept records are gone: {missing[:5]}"
    return set(listed)


def passes_with_rewrites(log: Path) -> list[dict[str, object]]:
    found = []
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            body = json.loads(line)
            if body["files_after"] < body["files_before"]:
                found.append(body)
    return found


def test_compaction_beside_a_running_pipeline_and_readers_is_exact(pipeline: Pipeline, tmp_path: Path) -> None:
    pipeline.extra = FAST_EPOCHS
    pipeline.produce(300)
    for node_id in (1, 2):
        pipeline.launch(node_id)
    pipeline.wait_spread(2)
    # a file may be compacted once more than RECORDS_KEPT (100) later epochs are recorded
    pipeline.wait_until(lambda: len(record_epochs(pipeline.output)) >= 100 and record_epochs(pipeline.output)[0] > 15,
                        180, "more than 100 epochs recorded")
    log = tmp_path / "compact.log"
    with Readers(pipeline.output, pipeline.topic) as readers, open(log, "wb") as handle:
        compactor = subprocess.Popen(compact(pipeline, "--every", "1", "--grace", "2", "--json"), stdout=handle,
                                     stderr=subprocess.STDOUT)
        try:
            pipeline.wait_until(lambda: len(passes_with_rewrites(log)) >= 8, 120, "8 passes that rewrote files")
            assert compactor.poll() is None, log.read_text()
            report, _ = finish_beside_compaction(pipeline)
            assert report.ok and report.duplicated == 0, report.table()
            # the passes go on while settled files remain; each replaced directory is deleted after its grace
            pipeline.wait_until(lambda: work_directories(pipeline.output) == [], 60, "no work directory left")
        finally:
            compactor.send_signal(signal.SIGTERM)
            code = compactor.wait(60)
    text = log.read_text()
    assert code == 0 and "Traceback" not in text and "compaction pass failed" not in text, text[-3000:]
    assert readers.problems == [], readers.problems[:10]
    reads = readers.reads
    assert reads["default"] >= 10 and reads["snapshot"] >= 10 and reads["listings"] >= 100, readers.summary()
    files = data_files(pipeline.output, pipeline.topic)
    compacted = [f for f in files if os.path.basename(f).startswith("epochs-")]
    print(f"reads: {readers.summary()}; passes that rewrote {len(passes_with_rewrites(log))}, published files "
          f"{len(files)} (the sink published {len(readers.sink_files)} or more)")
    kept = assert_records_whole(pipeline.output)
    settled = [f for f in files if f"{pipeline.topic}/{f}" not in kept]  # what no kept record lists
    directories = {os.path.dirname(f) for f in files}
    assert compacted and len(settled) <= 2 * len(directories), settled  # an output, maybe one file alone
    gone = len(readers.sink_files) - len([f for f in files if os.path.basename(f).startswith("epoch-")])
    assert gone >= 50 and len(files) < len(readers.sink_files), (gone, len(files), len(readers.sink_files))
    checked = verify(pipeline)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    for node in pipeline.nodes.values():  # started again, the nodes reconcile with the lake: no rollback
        node.terminate()
        assert node.wait(60) == 0
    logs_before = {n: len(node.log_text()) for n, node in pipeline.nodes.items()}
    for node_id in (1, 2):
        pipeline.launch(node_id)
    pipeline.wait_spread(2)
    produce(pipeline.bootstrap, pipeline.topic, [b"after-%d" % i for i in range(400)])
    report = pipeline.finish()
    assert report.ok and report.missing == 0 and report.duplicated == 0, report.table()
    for node_id, node in pipeline.nodes.items():
        started = node.log_text()[logs_before[node_id]:]
        assert "control state and lake agree" in started, started[-3000:]
        assert not any(m in started for m in ROLLBACK_MARKS), started[-3000:]


def test_a_compaction_killed_between_steps_is_exact_after_a_rerun(embedded: Pipeline) -> None:
    pipeline = embedded
    pipeline.extra = ("--checkpoint-interval-ms", "100")
    pipeline.produce(500)
    pipeline.launch(1, "--partition-by", "hour")
    pipeline.wait_until(lambda: len(record_epochs(pipeline.output)) >= 100 and record_epochs(pipeline.output)[0] > 20,
                        180, "more than 100 epochs recorded")
    report = pipeline.finish()
    assert report.ok, report.table()
    pipeline.nodes[1].terminate()
    assert pipeline.nodes[1].wait(60) == 0
    before = data_files(pipeline.output, pipeline.topic)

    for fault, leftover_outputs in (("after-write", 0), ("after-exchange", 1)):
        killed = subprocess.run([sys.executable, str(FAULT_SCRIPT), fault, *compact(pipeline, "--grace", "0")[len(CLI):]],
                                capture_output=True, text=True, timeout=120)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        # what it left: written work directories; after an exchange, the replaced directory (the run
        # after-exchange deleted the after-write run's work directories first: never exchanged)
        assert len(work_directories(pipeline.output)) >= 1
        files = data_files(pipeline.output, pipeline.topic)
        assert len([f for f in files if os.path.basename(f).startswith("epochs-")]) == leftover_outputs
        checked = verify(pipeline)
        assert checked.returncode == 0, f"{fault}: {checked.stdout}{checked.stderr}"
        assert assert_records_whole(pipeline.output)

    rerun = subprocess.run(compact(pipeline, "--grace", "0", "--json"), capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    body = json.loads(rerun.stdout)
    assert body["leftovers_deleted"] >= 1 and work_directories(pipeline.output) == []
    after = data_files(pipeline.output, pipeline.topic)
    assert len(after) < len(before) and all(f.count("/") == 2 for f in after)  # dt=.../hour=.../file
    checked = verify(pipeline)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert assert_records_whole(pipeline.output)

    pipeline.nodes[1].start()  # reconciles without seeing a rollback, and goes on exactly once
    produce(pipeline.bootstrap, pipeline.topic, [b"after-%d" % i for i in range(300)])
    report = pipeline.finish()
    assert report.ok and report.missing == 0 and report.duplicated == 0, report.table()
    text = pipeline.nodes[1].log_text()
    assert not any(m in text for m in ROLLBACK_MARKS), text[-3000:]


def test_compact_refuses_an_s3_tree_in_one_line() -> None:
    refused = subprocess.run([*CLI, "compact", "--output", "s3://lake/out", "--topic", "t"], capture_output=True,
                             text=True, timeout=60)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "no atomic swap of a directory" in refused.stderr and "table-format=iceberg" in refused.stderr

