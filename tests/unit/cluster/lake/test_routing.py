"""The table-name template (parse, validation) and the routing of rows to tables."""
from __future__ import annotations

import re

import pyarrow as pa
import pytest

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.lake.partitioning import split_by_partition
from laminar_kafka.cluster.lake.routing import Router, rejected_rows, route
from laminar_kafka.cluster.lake.routing_template import FieldPart, Literal, TableTemplate, TopicPart
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.decode.rejected import REJECTED_SCHEMA


def rows(region: list[object] | pa.Array, topics: list[str] | None = None, **extra: list[object]) -> pa.RecordBatch:
    count = len(region)
    topic = pa.array(topics or ["orders"] * count).dictionary_encode()
    return pa.RecordBatch.from_pydict({
        "_topic": topic, "_partition": pa.array([0] * count, pa.int32()),
        "_offset": pa.array(range(count), pa.int64()), "region": region, **extra,
    })


# --- the template ---------------------------------------------------------------------------------

def test_parse_parts_and_identity() -> None:
    template = TableTemplate.parse("ev_{topic:1}_{field:region}_{topic}", topic_regex=r"(\w+)\.v[0-9]+")
    assert template.parts == (Literal("ev_"), TopicPart(1), Literal("_"), FieldPart("region"), Literal("_"), TopicPart())
    assert template.fields == ("region",)
    assert template.required_fields() == "region:integer|string|boolean"
    assert not template.is_identity
    assert TableTemplate.parse().is_identity
    assert not TableTemplate.parse("{topic}", allowed="a.*").is_identity
    assert TableTemplate.parse("all_events").parts == (Literal("all_events"),)


@pytest.mark.parametrize(("text", "regex", "allowed", "message"), [
    ("{tpoic}", "", "", "unknown placeholder {tpoic}"),
    ("{field:}", "", "", "unknown placeholder {field:}"),
    ("{topic:0}", "(a)", "", "unknown placeholder {topic:0}"),
    ("t_{field:a", "", "", "unbalanced brace"),
    ("t-{topic}", "", "", "may hold only"),
    ("", "", "", "is empty"),
    ("{topic:1}", "", "", "needs table-topic-regex"),
    ("{topic}", "(a)", "", "uses no {topic:N}"),
    ("{topic:2}", "(a)", "", "has 1 group(s)"),
    ("{topic:1}", "(a", "", "table-topic-regex '(a' is not a regular expression"),
    ("{topic}", "", "[", "table-allowed '[' is not a regular expression"),
])
def test_parse_refuses_in_one_line(text: str, regex: str, allowed: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)) as info:
        TableTemplate.parse(text, regex, allowed)
    assert "\n" not in str(info.value)


def test_name_problems() -> None:
    template = TableTemplate.parse("{field:r}", allowed="eu_.*|us")
    assert template.name_problem("eu_west") == ""
    assert "not allowed by table-allowed" in template.name_problem("asia")
    assert "not a table name" in template.name_problem("9lives")
    assert "not a table name" in template.name_problem("_rejected")
    assert "not a table name" in template.name_problem("a/b")
    assert "not a table name" in template.name_problem("a" * 201)


# --- routing --------------------------------------------------------------------------------------

def test_groups_keep_row_order_and_dots_dashes_become_underscores() -> None:
    batch = rows(["eu-west", "us", "eu.west", "us", "eu_west"])
    routed = route(batch, TableTemplate.parse("ev_{field:region}"))
    assert routed.refused is None
    groups = {name: part.column("_offset").to_pylist() for name, part in routed.groups}
    assert groups == {"ev_eu_west": [0, 2, 4], "ev_us": [1, 3]}
    assert [name for name, _ in routed.groups] == ["ev_eu_west", "ev_us"]


def test_one_table_is_the_batch_itself() -> None:
    batch = rows(["eu", "eu"])
    routed = route(batch, TableTemplate.parse("{topic}_{field:region}"))
    assert routed.groups == (("orders_eu", batch),)


def test_a_literal_template_routes_every_topic_to_one_table() -> None:
    batch = rows(["x", "y"], topics=["a", "b"])
    assert route(batch, TableTemplate.parse("all_events")).groups == (("all_events", batch),)
    assert route(batch, TableTemplate.parse("9")).reasons[0].startswith("table-template: '9' is not a table name")


def test_integer_and_boolean_fields() -> None:
    batch = rows(["x", "x", "x"], shard=pa.array([3, 7, 3], pa.int64()), hot=[True, False, True])
    routed = route(batch, TableTemplate.parse("t{field:shard}_{field:hot}"))
    assert {name: part.num_rows for name, part in routed.groups} == {"t3_true": 2, "t7_false": 1}


def test_topic_regex_groups_and_mismatch() -> None:
    batch = rows(["a", "b", "c"], topics=["shop.orders.v1", "other", "shop.refunds.v2"])
    template = TableTemplate.parse("{topic:1}", topic_regex=r"shop\.(\w+)\.v[0-9]+")
    routed = route(batch, template)
    assert {name: part.column("region").to_pylist() for name, part in routed.groups} == {"orders": ["a"], "refunds": ["c"]}
    assert routed.refused is not None and routed.refused.column("region").to_pylist() == ["b"]
    assert routed.reasons == (r"table-template: topic other does not match table-topic-regex shop\.(\w+)\.v[0-9]+",)


def test_optional_group_that_matched_nothing_is_refused() -> None:
    template = TableTemplate.parse("t_{topic:1}", topic_regex=r"(x)?orders")
    routed = route(rows(["a"]), template)
    assert routed.groups == ()
    assert routed.reasons == ("table-template: group 1 of table-topic-regex matched nothing in topic orders",)


def test_every_refusal_reason() -> None:
    batch = rows(["eu", None, "a/b", "asia", "eu", "9"], kind=["x"] * 6)
    routed = route(batch, TableTemplate.parse("{field:region}", allowed="eu|asia_.*"))
    assert [(n, p.column("_offset").to_pylist()) for n, p in routed.groups] == [("eu", [0, 4])]
    assert routed.refused is not None
    assert routed.refused.column("_offset").to_pylist() == [1, 2, 3, 5]
    assert routed.reasons[0] == "table-template: field region is null"
    assert "'a/b' is not a table name" in routed.reasons[1]
    assert routed.reasons[2] == "table-template: table asia is not allowed by table-allowed eu|asia_.*"
    assert "'9' is not a table name" in routed.reasons[3]


def test_missing_field_and_unnameable_type_refuse_every_row() -> None:
    batch = rows(["eu", "us"], amount=[1.5, 2.5])
    missing = route(batch, TableTemplate.parse("{field:customer}"))
    assert missing.groups == () and missing.reasons == ("table-template: field customer is missing",) * 2
    floats = route(batch, TableTemplate.parse("{field:amount}"))
    assert floats.groups == () and "amount is double, which cannot name a table" in floats.reasons[0]


def test_first_reason_wins_per_row() -> None:
    batch = rows([None], topics=["other"])
    routed = route(batch, TableTemplate.parse("{topic:1}_{field:region}", topic_regex="(orders)"))
    assert routed.reasons == ("table-template: topic other does not match table-topic-regex (orders)",)


def test_empty_batch_and_a_batch_without_topic() -> None:
    assert route(rows([]), TableTemplate.parse("{field:region}")).groups == ()
    plain = pa.RecordBatch.from_pydict({"region": ["eu"]})
    assert route(plain, TableTemplate.parse("r_{field:region}")).groups[0][0] == "r_eu"
    with pytest.raises(SinkError, match="reads the topic"):
        route(plain, TableTemplate.parse("{topic}_{field:region}"))


def test_dictionary_field_and_string_topic_column() -> None:
    batch = pa.RecordBatch.from_pydict({"_topic": ["a", "b"], "region": pa.array(["x", "y"]).dictionary_encode()})
    routed = route(batch, TableTemplate.parse("{topic}_{field:region}"))
    assert [name for name, _ in routed.groups] == ["a_x", "b_y"]


def test_rejected_rows_schema_and_key() -> None:
    batch = rows(pa.array([None, None], pa.string()), _key=pa.array([b"k1", None], pa.binary()),
                 _timestamp=pa.array([1, None], pa.timestamp("us")))
    routed = route(batch, TableTemplate.parse("{field:region}"))
    assert routed.refused is not None
    rejected = rejected_rows(routed.refused, routed.reasons)
    assert rejected.schema.equals(REJECTED_SCHEMA)
    assert rejected.column("_key").to_pylist() == [b"k1", None]
    assert rejected.column("value").null_count == 2
    assert rejected.column("error").to_pylist() == ["table-template: field region is null"] * 2
    decoded_key = rows([None], _key=["text"])
    assert rejected_rows(decoded_key, ("r",)).column("_key").null_count == 1
    with pytest.raises(SinkError, match="no _offset column"):
        rejected_rows(pa.RecordBatch.from_pydict({"_topic": ["t"], "_partition": pa.array([0], pa.int32())}), ("r",))


def test_router_policy() -> None:
    batch = rows(["eu", None])
    groups, rejected = Router(TableTemplate.parse("{field:region}"), fail_on_bad=False).route(batch)
    assert [name for name, _ in groups] == ["eu"] and rejected is not None and rejected.num_rows == 1
    with pytest.raises(SinkError, match=r"record orders:0@1 cannot be routed: table-template: field region is null "
                                        r"\(on-bad-record=fail"):
        Router(TableTemplate.parse("{field:region}"), fail_on_bad=True).route(batch)
    assert Router(TableTemplate.parse("{field:region}"), fail_on_bad=True).route(rows(["eu"]))[1] is None


def test_split_by_partition_under_a_table() -> None:
    batch = rows(["eu", "eu"], _timestamp=pa.array([0, 86_400_000], pa.timestamp("ms")))
    parts = split_by_partition(batch, PartitionSpec.parse("day"), table="ev_eu")
    assert [directory for directory, _ in parts] == ["ev_eu/dt=1970-01-01", "ev_eu/dt=1970-01-02"]


def test_split_merges_the_sources_rejected_records_in_offset_order() -> None:
    batch = rows(["eu", None, "eu", None])
    source = rejected_rows(rows(["x", "x"]).slice(0, 2), ("bad json", "bad json"))  # offsets 0, 1
    source = source.set_column(2, REJECTED_SCHEMA.field("_offset"), pa.array([2, 5], pa.int64()))
    router = Router(TableTemplate.parse("{field:region}"), fail_on_bad=False)
    parts, rejected = router.split(batch, PartitionSpec.parse("none"), source)
    assert [(directory, part.num_rows) for directory, part in parts] == [("eu", 2)]
    assert rejected is not None and rejected.schema.equals(REJECTED_SCHEMA)
    assert rejected.column("_offset").to_pylist() == [1, 2, 3, 5]
    assert rejected.column("error").to_pylist()[:2] == ["table-template: field region is null", "bad json"]
    assert router.split(rows(["eu"]), PartitionSpec.parse("none"), source)[1] is source
    assert router.split(batch, PartitionSpec.parse("none"))[1] is not None
