"""`laminar-kafka dev produce`: create a topic when it does not exist and produce numbered records.

The first step after `dev up` in the README's "Running a cluster": a topic the nodes can land, with
records `verify` can audit. Record ``n`` is ``record-<n, 12 digits>`` on partition ``n % partitions``
(:func:`laminar_kafka.devstack.producers.produce_numbered`); idempotent, ``acks=all``.

The Kafka servers: ``--bootstrap``, else ``bootstrap`` in ``--config`` or ``LAMINAR_BOOTSTRAP`` (with
the file's ``[kafka]`` client properties, as for ``status`` and ``verify``), else the dev stack
`dev up` recorded (its state file). Exit 0 when every record was acknowledged, 1 otherwise (one line).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from laminar_kafka.cli.common import Parser, add_kafka_client, kafka_client_of
from laminar_kafka.cli.tools import dev_tool
from laminar_kafka.cluster.errors import UsageError

__all__ = ["DEFAULT_PARTITIONS", "add_produce_command", "dev_produce"]

#: partitions of a topic `dev produce` creates (the demo's count)
DEFAULT_PARTITIONS = 8


def add_produce_command(actions: argparse._SubParsersAction[Parser]) -> None:
    """Register ``dev produce`` (no dev module imported: ``--help`` works on a runtime-only install)."""
    produce = actions.add_parser("produce", help="create a topic if needed and produce numbered records to it",
                                 description=(
        "Create the topic when it does not exist and produce --records numbered records to it: record n is "
        "record-<n in 12 digits> on partition n % partitions (idempotent, acks=all). Kafka: --bootstrap, else "
        "bootstrap in --config or LAMINAR_BOOTSTRAP, else the stack `laminar-kafka dev up` recorded."))
    add_kafka_client(produce)
    produce.add_argument("--topic", required=True, help="the topic (created when it does not exist)")
    produce.add_argument("--partitions", type=int, default=None,
                         help=f"partitions of the topic when it is created (default {DEFAULT_PARTITIONS}); an existing "
                              "topic keeps its own, and a different count given here is refused")
    produce.add_argument("--records", type=int, required=True, help="how many records to produce")
    produce.add_argument("--rate", type=float, default=0.0,
                         help="records per second, at most (default 0: as fast as the broker takes them)")
    produce.add_argument("--first", type=int, default=0,
                         help="number of the first record (default 0; continue a topic with its record count)")
    produce.set_defaults(handler=dev_tool("dev produce", dev_produce))


def _kafka(args: argparse.Namespace, state_file: Path) -> object:
    """The Kafka client configuration: from the flags, the config file or the environment, else the
    recorded dev stack's bootstrap servers."""
    from laminar_kafka.devstack.stack import read_state
    from laminar_kafka.kafka_source.clients import KafkaClientConfig

    try:
        return kafka_client_of(args)
    except UsageError:
        recorded = read_state(state_file)
        if recorded is None or not recorded.healthy:
            raise UsageError("dev produce needs Kafka: --bootstrap, LAMINAR_BOOTSTRAP, or a running "
                             "`laminar-kafka dev up`") from None
        return KafkaClientConfig(recorded.bootstrap)


def dev_produce(args: argparse.Namespace) -> int:
    """Create the topic when needed, produce ``--records`` records, print one line of what was done."""
    from confluent_kafka import KafkaError, KafkaException

    from laminar_kafka.devstack.producers import produce_numbered
    from laminar_kafka.devstack.stack import default_state_file
    from laminar_kafka.devstack.topics import ensure_topic
    from laminar_kafka.kafka_source.clients import KafkaClientConfig

    if args.records < 0 or args.rate < 0 or args.first < 0 or (args.partitions is not None and args.partitions < 1):
        raise UsageError("--records, --rate and --first must be >= 0 and --partitions >= 1")
    kafka = _kafka(args, args.state_file or default_state_file())  # dev --state-file
    assert isinstance(kafka, KafkaClientConfig)
    wanted = args.partitions or DEFAULT_PARTITIONS
    started = time.monotonic()
    try:
        partitions, created = ensure_topic(kafka, args.topic, wanted)
        if args.partitions is not None and partitions != args.partitions:
            raise UsageError(f"topic {args.topic!r} exists with {partitions} partitions, not {args.partitions}")
        acknowledged = produce_numbered(kafka, args.topic, args.records, rate=args.rate, first=args.first)
    except KafkaException as exc:  # one line: librdkafka's text, not the KafkaError{...} dump
        error = exc.args[0] if exc.args else None
        text = error.str() if isinstance(error, KafkaError) else str(exc)
        print(f"error: producing to {args.topic!r} on {kafka.bootstrap} failed: {text}", file=sys.stderr)
        return 1
    print(f"{'created' if created else 'topic'} {args.topic} ({partitions} partitions); produced {acknowledged} "
          f"records (record-{args.first:012d} onwards) in {time.monotonic() - started:.1f} s")
    return 0
