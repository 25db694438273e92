"""`include-headers` through the CLI against real Kafka: records with real Kafka headers (several,
repeated keys, binary and empty values, a null value, none at all) land their `_headers` column
exactly as produced, in order, and the lake is exact."""
from __future__ import annotations

import json

import pytest

from laminar_kafka.kafka_source.decode.arrow_batch import HEADERS_TYPE
from tests import support
from tests.integration.cluster.harness import Pipeline, assert_exact
from tests.integration.cluster.test_cli_commands import cli
from tests.integration.cluster.test_json_cli import landed

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

Headers = list[tuple[str, bytes | None]] | None

#: every shape a record's headers take here, cycled over the records
SHAPES: tuple[Headers, ...] = (
    None,                                                                     # no headers at all
    [("trace", b"1")],                                                        # one
    [("a", b"1"), ("a", b"2"), ("b", b"x"), ("a", b"3")],                     # a key repeated, order kept
    [("null", None), ("empty", b"")],                                         # a null value, an empty value
    [("bin", bytes(range(256))), ("ключ", "é☃".encode()), ("bin", b"\x00")],  # binary values, a non-ASCII key
)


def headers_of(index: int) -> Headers:
    shape = SHAPES[index % len(SHAPES)]
    if shape is None:
        return None
    # the record's index in a header too: a header landed on the wrong row cannot go unnoticed
    return [*shape, ("index", str(index).encode())] if index % 2 else [("index", str(index).encode()), *shape]


def test_include_headers_lands_each_records_headers_exactly(pipeline: Pipeline) -> None:
    count = 500
    kafka = support.producer(pipeline.bootstrap)
    failures: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    for i in range(count):
        headers = headers_of(i)
        # headers=None: librdkafka sends a record with no header at all
        kafka.produce(pipeline.topic, value=b"v%d" % i, partition=i % 8, on_delivery=on_delivery,
                      **({"headers": headers} if headers is not None else {}))
        kafka.poll(0)
    assert kafka.flush(30) == 0 and not failures, failures

    pipeline.launch(1, "--include-headers", "true")
    report = pipeline.finish()
    assert_exact(report, pipeline)
    pipeline.nodes[1].terminate()
    assert pipeline.nodes[1].wait(60) == 0

    table = landed(pipeline.output)
    assert table.schema.field("_headers").type == HEADERS_TYPE
    assert table.num_rows == count
    got = {value: row for value, row in zip(table.column("value").to_pylist(), table.column("_headers").to_pylist(), strict=True)}
    assert len(got) == count
    for i in range(count):
        expected = headers_of(i)
        want = None if expected is None else [{"key": k, "value": v} for k, v in expected]
        assert got[b"v%d" % i] == want, f"record {i}: landed {got[b'v%d' % i]!r}, produced {expected!r}"
    # the column's nulls are exactly the records without headers (not empty lists)
    assert table.column("_headers").null_count == sum(1 for i in range(count) if headers_of(i) is None) == count // len(SHAPES)

    verify = cli("verify", "--output", pipeline.output, "--bootstrap", pipeline.bootstrap, "--topic",
                 pipeline.topic, "--json")
    assert verify.returncode == 0 and json.loads(verify.stdout)["ok"], verify.stdout + verify.stderr


def test_without_include_headers_there_is_no_headers_column(pipeline: Pipeline) -> None:
    """The control: the column comes from the setting, not from the records having headers."""
    kafka = support.producer(pipeline.bootstrap)
    for i in range(40):
        kafka.produce(pipeline.topic, value=b"v%d" % i, partition=i % 8, headers=[("h", b"%d" % i)])
    assert kafka.flush(30) == 0
    pipeline.launch(1)
    assert_exact(pipeline.finish(), pipeline)
    assert "_headers" not in landed(pipeline.output).schema.names
