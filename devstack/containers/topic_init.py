"""The compose file's topic init: wait for Kafka and ZooKeeper, create the topic once, exit 0.

    python -m laminar_kafka.devstack.containers.topic_init --bootstrap kafka:9092 --zk zookeeper:2181 --topic orders --partitions 8

Idempotent (an existing topic with the wanted partition count is success), bounded by --timeout, so
the nodes can depend on it with `condition: service_completed_successfully` and need no healthcheck.
"""
from __future__ import annotations

import argparse
import sys
import time

from laminar_kafka.devstack.jvm.servers import kafka_healthy, zookeeper_session_ok
from laminar_kafka.devstack.topics import create_topic


def wait_ready(bootstrap: str, zk: str | None, deadline: float) -> None:
    """Until the broker answers metadata and (when given) ZooKeeper grants a session."""
    while not kafka_healthy(bootstrap, 1) or (zk and not zookeeper_session_ok(zk)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"Kafka at {bootstrap}{f' or ZooKeeper at {zk}' if zk else ''} not ready in time")
        time.sleep(0.5)


def ensure_topic(bootstrap: str, topic: str, partitions: int, deadline: float) -> str:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=10).topics.get(topic)
    if existing is not None and existing.error is None:
        if len(existing.partitions) != partitions:
            raise SystemExit(f"topic {topic} exists with {len(existing.partitions)} partitions, not {partitions}")
        return "exists"
    create_topic(bootstrap, topic, partitions, max(5.0, deadline - time.monotonic()))
    return "created"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m laminar_kafka.devstack.containers.topic_init", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--zk", default=None)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args(argv)
    started = time.monotonic()
    deadline = started + args.timeout
    try:
        wait_ready(args.bootstrap, args.zk, deadline)
        state = ensure_topic(args.bootstrap, args.topic, args.partitions, deadline)
    except TimeoutError as exc:
        print(f"topic init: {exc}", file=sys.stderr)
        return 1
    print(f"topic init: {args.topic} ({args.partitions} partitions) {state} after {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
