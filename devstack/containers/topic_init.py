"""The compose files' init: wait for Kafka and ZooKeeper, create the topic (and the lake's bucket) once, exit 0.

    python -m laminar_kafka.devstack.containers.topic_init --bootstrap kafka:9092 --zk zookeeper:2181 --topic orders --partitions 8
    python -m laminar_kafka.devstack.containers.topic_init --bootstrap kafka1:9092,kafka2:9092,kafka3:9092 \\
        --topic orders --partitions 8 --replication-factor 3 --bucket lake     # S3 endpoint and keys: AWS_*

Idempotent (an existing topic with the wanted partition count, an existing bucket: success), bounded
by --timeout, so the nodes can depend on it with `condition: service_completed_successfully` and
need no healthcheck. With --replication-factor N it waits for N brokers first. --bucket creates an
S3 bucket on the endpoint the ``AWS_*`` variables name (``AWS_ENDPOINT_URL``, the keys, the region).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import urllib.parse

from laminar_kafka.devstack.jvm.kafka_cluster import kafka_healthy
from laminar_kafka.devstack.jvm.servers import zookeeper_session_ok
from laminar_kafka.devstack.topics import create_topic


def wait_ready(bootstrap: str, zk: str | None, deadline: float, brokers: int = 1) -> None:
    """Until `brokers` brokers answer metadata and (when given) ZooKeeper grants a session."""
    while not kafka_healthy(bootstrap, brokers) or (zk and not zookeeper_session_ok(zk)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"Kafka at {bootstrap} ({brokers} brokers)"
                               f"{f' or ZooKeeper at {zk}' if zk else ''} not ready in time")
        time.sleep(0.5)


def ensure_topic(bootstrap: str, topic: str, partitions: int, deadline: float, replication: int = 1) -> str:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=10).topics.get(topic)
    if existing is not None and existing.error is None:
        if len(existing.partitions) != partitions:
            raise SystemExit(f"topic {topic} exists with {len(existing.partitions)} partitions, not {partitions}")
        return "exists"
    create_topic(bootstrap, topic, partitions, max(5.0, deadline - time.monotonic()), replication=replication)
    return "created"


def ensure_bucket(bucket: str, deadline: float) -> str:
    """Create `bucket` on the S3 endpoint of the ``AWS_*`` variables unless it exists; retried until
    `deadline` (the store may still be starting). Raises TimeoutError with the last error.

    The endpoint is passed explicitly: pyarrow's ``S3FileSystem(...)`` ignores ``AWS_ENDPOINT_URL``
    (only ``FileSystem.from_uri`` reads it); the keys and the region come from the environment."""
    import pyarrow as pa
    import pyarrow.fs as pafs

    endpoint = urllib.parse.urlsplit(os.environ.get("AWS_ENDPOINT_URL", ""))
    options: dict[str, str] = {"endpoint_override": endpoint.netloc, "scheme": endpoint.scheme} if endpoint.netloc else {}
    while True:
        try:
            fs = pafs.S3FileSystem(allow_bucket_creation=True, **options)
            if fs.get_file_info(bucket).type == pafs.FileType.Directory:
                return "exists"
            fs.create_dir(bucket, recursive=False)
            return "created"
        except (OSError, pa.ArrowException) as exc:
            if time.monotonic() > deadline:
                raise TimeoutError(f"bucket {bucket} not created in time: {' '.join(str(exc).split())}") from exc
            time.sleep(1.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m laminar_kafka.devstack.containers.topic_init", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--zk", default=None)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--replication-factor", type=int, default=1, help="replicas per partition (default 1); "
                        "waits for this many brokers")
    parser.add_argument("--bucket", default=None, help="an S3 bucket to create too (endpoint and keys: AWS_*)")
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args(argv)
    started = time.monotonic()
    deadline = started + args.timeout
    try:
        bucket = f", bucket {args.bucket} {ensure_bucket(args.bucket, deadline)}" if args.bucket else ""
        wait_ready(args.bootstrap, args.zk, deadline, args.replication_factor)
        state = ensure_topic(args.bootstrap, args.topic, args.partitions, deadline, args.replication_factor)
    except TimeoutError as exc:
        print(f"topic init: {exc}", file=sys.stderr)
        return 1
    print(f"topic init: {args.topic} ({args.partitions} partitions, {args.replication_factor} replicas) {state}"
          f"{bucket} after {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
