"""Landing cost, side by side (prints JSON): CPU per record, peak RSS, records/s, and for nodes the
time from process start to the first durable row. Every reader is a separate process reading the
same pre-filled topic (8 partitions); CPU = user + sys of that process (``os.wait4``), divided by
records; peak RSS = its ``ru_maxrss``. Readers run in alternating order, ``--rounds`` times each.

    .venv/bin/python bench/bench_landing.py [--records 2000000] [--rounds 2] [--payload raw|json|both]
    .venv/bin/python bench/bench_landing.py --soak-minutes 10 [--soak-rate 20000]

Readers (``reader <role>`` runs one in this file, for the driver):
- ``raw``: a confluent-kafka ``consume(10000)`` loop that only counts (the floor);
- ``naive``: the same loop + Arrow columns (value, partition, offset) + ``pq.write_table`` per 100k
  rows, no exactly-once (JSON payload: ``pyarrow.json`` over each chunk's values);
- ``naive-same``: ``naive`` writing the columns a node writes: also ``_topic`` and ``_timestamp``
  (which the node's ``dt=`` directories need; the client builds a tuple per message to read it);
- ``source``: a ``KafkaSource.poll_batch`` loop (``_topic,_partition,_offset`` metadata);
- ``node``: one embedded ``laminar-kafka run`` landing into Parquet, exactly once;
- ``zk-node``: one ZooKeeper-mode node; ``3-nodes``: three ZooKeeper-mode nodes (CPU summed).

Payloads: ``raw`` 100 B incompressible; ``json`` about 1 KB compressible JSON with 10 fields
(``--format json`` with ``--json-schema``). Ratios against the floor (``raw``) and against the naive
landing are printed, from each reader's best run and from its median run (the median is the steadier
figure where other work shares the cores). Not a timed test.

The project's modules are compiled to bytecode first (as ``pip install`` does), so a reader's CPU
does not include compiling them when ``PYTHONDONTWRITEBYTECODE`` is set.
"""
from __future__ import annotations

import argparse
import compileall
import io
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PARTITIONS = 8
CHUNK = 10_000
JSON_SCHEMA = ",".join([f"f{i}:string" for i in range(7)] + ["n0:int64", "n1:int64", "x:double"])


def json_value(i: int, rng: random.Random) -> bytes:
    words = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
    fields = {f"f{j}": " ".join(rng.choice(words) for _ in range(16)) for j in range(7)}
    fields.update(n0=i, n1=rng.randrange(1 << 40), x=rng.random())
    return json.dumps(fields).encode()


def fill(bootstrap: str, topic: str, records: int, payload: str) -> None:
    from bench_source import fill as fill_topic  # this directory: the same fill as bench_source

    rng = random.Random(7)
    fill_topic(bootstrap, topic, records,
               (lambda _i: os.urandom(100)) if payload == "raw" else (lambda i: json_value(i, rng)))


# -- the readers (run in a child process) -------------------------------------------------------


def _consumer(bootstrap: str, topic: str):  # type: ignore[no-untyped-def]
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    return consumer


def read_raw(bootstrap: str, topic: str, total: int, payload: str) -> None:
    consumer = _consumer(bootstrap, topic)
    count = 0
    while count < total:
        count += len(consumer.consume(num_messages=CHUNK, timeout=1.0))
    consumer.close()


def read_naive(bootstrap: str, topic: str, total: int, payload: str, output: str, same_columns: bool = False) -> None:
    import pyarrow as pa
    import pyarrow.json as pa_json
    import pyarrow.parquet as pq

    consumer = _consumer(bootstrap, topic)
    count, pending, files = 0, [], 0
    pending_rows = 0
    while count < total:
        messages = consumer.consume(num_messages=CHUNK, timeout=1.0)
        if not messages:
            continue
        count += len(messages)
        values = [m.value() for m in messages]
        if payload == "json":
            options = pa_json.ParseOptions(explicit_schema=pa.schema(
                [(f"f{i}", pa.string()) for i in range(7)] + [("n0", pa.int64()), ("n1", pa.int64()), ("x", pa.float64())]))
            columns = pa_json.read_json(io.BytesIO(b"\n".join(values)), parse_options=options).combine_chunks().to_batches()[0]
            batch = columns.append_column("_partition", pa.array([m.partition() for m in messages], pa.int32()))
        else:
            batch = pa.RecordBatch.from_arrays([pa.array(values, pa.binary()),
                                                pa.array([m.partition() for m in messages], pa.int32())],
                                               names=["value", "_partition"])
        batch = batch.append_column("_offset", pa.array([m.offset() for m in messages], pa.int64()))
        if same_columns:  # the columns a node writes besides these: _topic, and _timestamp for dt=
            batch = batch.append_column("_topic", pa.DictionaryArray.from_arrays(
                pa.array([0] * len(messages), pa.int32()), pa.array([topic])))
            batch = batch.append_column("_timestamp", pa.array([m.timestamp()[1] for m in messages], pa.timestamp("ms")))
        pending.append(batch)
        pending_rows += batch.num_rows
        if pending_rows >= 100_000 or count >= total:
            files += 1
            pq.write_table(pa.Table.from_batches(pending), f"{output}/part-{files:05d}.parquet")
            pending, pending_rows = [], 0
    consumer.close()


def read_source(bootstrap: str, topic: str, total: int, payload: str) -> None:
    import asyncio

    from laminar_kafka.kafka_source import ConnectorConfig, DeliveryGuarantee, KafkaSource, SourcePosition, SourceStart

    props = {"bootstrap.servers": bootstrap, "topic": topic, "group.id": f"bench-{uuid.uuid4().hex}",
             "include-metadata": "_topic,_partition,_offset"}
    if payload == "json":
        props.update({"format": "json", "json-schema": JSON_SCHEMA})

    async def run() -> None:
        source = KafkaSource()
        await source.start(SourceStart(ConnectorConfig("kafka", props), SourcePosition.Initial(),
                                       DeliveryGuarantee.EXACTLY_ONCE))
        ready = source.data_ready_notify()
        assert ready is not None
        count = 0
        while count < total:
            result = await source.poll_batch(CHUNK)
            if result is None:
                await ready.wait()
                continue
            count += result.records.num_rows
        await source.close()

    asyncio.run(run())


# -- the driver ----------------------------------------------------------------------------------


def measure(argv: list[list[str]], env: dict[str, str] | None, done: object, first_row: object = None,
            log_path: Path | None = None) -> dict[str, float]:
    """Start every argv as a process, wait until ``done()`` (None: until each exits), then SIGTERM
    the ones still running; CPU and peak RSS from ``os.wait4`` (so nothing else may reap them)."""
    started = time.monotonic()
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL  # closed below
    pids = [subprocess.Popen(a, env=env, stdout=log, stderr=log).pid for a in argv]
    ended: dict[int, tuple[int, object]] = {}

    def reap(flags: int) -> None:
        for pid in pids:
            if pid not in ended:
                got, status, usage = os.wait4(pid, flags)
                if got:
                    ended[pid] = (os.waitstatus_to_exitcode(status), usage)

    first = None
    while True:
        reap(os.WNOHANG)
        if first is None and first_row is not None and first_row():  # type: ignore[operator]
            first = time.monotonic() - started
        if any(code != 0 for code, _ in ended.values()):
            raise RuntimeError(f"{argv[0][:6]} exited {[code for code, _ in ended.values()]} (log: {log_path})")
        if (done() if done is not None else len(ended) == len(pids)):  # type: ignore[operator]
            break
        time.sleep(0.05)
    elapsed = time.monotonic() - started
    for pid in pids:
        if pid not in ended:
            os.kill(pid, signal.SIGTERM)
    reap(0)
    if log_path:
        log.close()  # type: ignore[union-attr]
    cpu = sum(u.ru_utime + u.ru_stime for _, u in ended.values())  # type: ignore[attr-defined]
    rss = max(u.ru_maxrss / 1024 for _, u in ended.values())  # type: ignore[attr-defined]
    result = {"seconds": round(elapsed, 2), "cpu_s": round(cpu, 2), "peak_rss_mb": round(rss)}
    if first is not None:
        result["first_durable_row_s"] = round(first, 2)
    return result


def landed(output: str) -> int:
    import pyarrow.parquet as pq

    from laminar_kafka.cluster.lake.parquet.sink import list_published, open_output

    fs, root = open_output(output)
    total = 0
    for path in list_published(fs, root):
        with fs.open_input_file(path) as handle:
            total += pq.ParquetFile(handle).metadata.num_rows
    return total


def run_reader(role: str, stack, topic: str, records: int, payload: str, base: Path) -> dict[str, float]:  # type: ignore[no-untyped-def]
    from laminar_kafka.devstack.processes import node_command, node_environment

    me = [sys.executable, __file__, "reader"]
    common = ["--bootstrap", stack.bootstrap, "--topic", topic, "--records", str(records), "--payload", payload]
    log = base / f"{role}-{payload}.log"
    if role in ("raw", "source"):
        result = measure([[*me, role, *common]], node_environment(), None, log_path=log)
    elif role in ("naive", "naive-same"):
        output = base / f"{role}-{uuid.uuid4().hex[:8]}"
        output.mkdir()
        result = measure([[*me, role, *common, "--output", str(output)]], node_environment(), None, log_path=log)
    else:
        name = f"{role}-{uuid.uuid4().hex[:8]}"
        output = str(base / name)
        flags = ["--bootstrap", stack.bootstrap, "--topic", topic, "--output", output, "--pipeline", name]
        if payload == "json":
            flags += ["--format", "json", "--json-schema", JSON_SCHEMA]
        nodes = {"node": [1], "zk-node": [1], "3-nodes": [1, 2, 3]}[role]
        zk = [] if role == "node" else ["--zk", stack.zk_hosts, "--session-timeout-ms", "4000"]
        argv = [node_command([*flags, *zk, "--node-id", str(n), "--metrics-port", "0"]) for n in nodes]
        result = measure(argv, node_environment(), lambda: landed(output) >= records,
                         first_row=lambda: landed(output) > 0, log_path=log)
    result["records_per_s"] = round(records / result["seconds"])
    result["cpu_us_per_record"] = round(result["cpu_s"] * 1e6 / records, 2)
    return result


ROLES = ("raw", "naive", "naive-same", "source", "node", "zk-node", "3-nodes")


def _ratios(cpu: dict[str, float]) -> dict[str, float]:
    """The source against the floor (``raw``), the nodes against the naive landing."""
    ratios = {}
    if "raw" in cpu and "source" in cpu:
        ratios["source_to_raw"] = round(cpu["source"] / cpu["raw"], 2)
    for naive in ("naive", "naive-same"):
        if naive in cpu:
            ratios.update({f"{r}_to_{naive}": round(cpu[r] / cpu[naive], 2) for r in ("node", "zk-node", "3-nodes") if r in cpu})
    return ratios


def drive(args: argparse.Namespace) -> None:
    from laminar_kafka.devstack.stack import DevStack

    base = Path(tempfile.mkdtemp(prefix="laminar-bench-landing-"))
    root = Path(__file__).resolve().parents[1]
    for package in ("kafka_source", "coordinator", "cluster", "devstack"):
        compileall.compile_dir(root / package, quiet=1)
    stack = DevStack.launch(kafka_brokers=1, zookeeper_servers=1, base_dir=base / "servers")
    report: dict[str, object] = {"records": args.records, "rounds": args.rounds}
    try:
        for payload in ("raw", "json") if args.payload == "both" else (args.payload,):
            topic = f"landing-{payload}-{uuid.uuid4().hex[:6]}"
            fill(stack.bootstrap, topic, args.records, payload)
            runs: dict[str, list[dict[str, float]]] = {role: [] for role in args.roles}
            for round_number in range(args.rounds):
                order = list(args.roles) if round_number % 2 == 0 else list(reversed(args.roles))
                for role in order:
                    runs[role].append(run_reader(role, stack, topic, args.records, payload, base))
            best = {role: min(r["cpu_us_per_record"] for r in rs) for role, rs in runs.items()}
            median = {role: round(statistics.median(r["cpu_us_per_record"] for r in rs), 2) for role, rs in runs.items()}
            report[payload] = {"runs": runs, "best_cpu_us_per_record": best, "ratios": _ratios(best),
                               "median_cpu_us_per_record": median, "median_ratios": _ratios(median)}
        print(json.dumps(report, indent=2))
    finally:
        stack.stop()


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def soak(minutes: float, rate: int) -> dict[str, object]:
    """One embedded node lands ``rate`` records/s (100 B, 8 partitions) for ``minutes``; its RSS
    every 10 s, and the growth from the first minute's peak to the last minute's."""
    from laminar_kafka.devstack.processes import NodeProcess
    from laminar_kafka.devstack.producers import ContinuousProducer
    from laminar_kafka.devstack.stack import DevStack
    from laminar_kafka.devstack.topics import create_topic

    base = Path(tempfile.mkdtemp(prefix="laminar-bench-soak-"))
    stack = DevStack.launch(kafka_brokers=1, zookeeper_servers=0, base_dir=base / "servers")
    try:
        topic = f"soak-{uuid.uuid4().hex[:6]}"
        create_topic(stack.bootstrap, topic, PARTITIONS)
        producer = ContinuousProducer(stack.bootstrap, topic, rate, PARTITIONS).start()
        node = NodeProcess.launch(1, bootstrap=stack.bootstrap, topic=topic, output=str(base / "out"), zk=None,
                                  pipeline="soak", log_dir=base / "logs")
        samples: list[tuple[float, float]] = []
        try:
            assert node.process is not None
            started = time.monotonic()
            while time.monotonic() - started < minutes * 60:
                time.sleep(10)
                samples.append((round(time.monotonic() - started), round(_rss_mb(node.process.pid), 1)))
        finally:
            producer.stop()
            node.stop()
        first = max(rss for at, rss in samples if at <= 60)
        last = max(rss for at, rss in samples if at >= samples[-1][0] - 60)
        return {"minutes": minutes, "rate_per_s": rate, "records": producer.acked, "landed": landed(str(base / "out")),
                "rss_mb_every_10s": [rss for _, rss in samples], "first_minute_peak_mb": first,
                "last_minute_peak_mb": last, "growth_mb": round(last - first, 1)}
    finally:
        stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    reader = sub.add_parser("reader")
    reader.add_argument("role", choices=("raw", "naive", "naive-same", "source"))
    reader.add_argument("--bootstrap", required=True)
    reader.add_argument("--topic", required=True)
    reader.add_argument("--records", type=int, required=True)
    reader.add_argument("--payload", choices=("raw", "json"), default="raw")
    reader.add_argument("--output")
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--payload", choices=("raw", "json", "both"), default="both")
    parser.add_argument("--roles", default=",".join(ROLES), help="comma-separated subset of " + ",".join(ROLES))
    parser.add_argument("--soak-minutes", type=float, default=0.0,
                        help="instead of the readers: one embedded node landing --soak-rate records/s for this "
                             "long, its RSS sampled every 10 s (memory flat over a long run)")
    parser.add_argument("--soak-rate", type=int, default=20_000)
    args = parser.parse_args()
    if args.soak_minutes > 0:
        print(json.dumps(soak(args.soak_minutes, args.soak_rate), indent=2))
        return
    if args.command == "reader":
        if args.role in ("naive", "naive-same"):
            read_naive(args.bootstrap, args.topic, args.records, args.payload, args.output, args.role == "naive-same")
        else:
            {"raw": read_raw, "source": read_source}[args.role](args.bootstrap, args.topic, args.records, args.payload)
        return
    args.roles = tuple(r for r in args.roles.split(",") if r)
    drive(args)


if __name__ == "__main__":
    main()
