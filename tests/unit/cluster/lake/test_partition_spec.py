"""The ``partition-by`` grammar: every form it takes, its canonical text, every refusal, the source's
``required-fields`` it implies and the directory keys of its terms (splitting rows:
test_partitioning.py and test_partitioning_fields.py)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laminar_kafka.cluster.lake.partition_spec import MAX_TERMS, PartitionSpec, PartitionTerm, Transform
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.decode.required_fields import parse_required_fields

KAFKA_DAY = PartitionTerm("_timestamp", Transform.DAY)
KAFKA_HOUR = PartitionTerm("_timestamp", Transform.HOUR)


@pytest.mark.parametrize(("text", "terms"), [
    ("region", (PartitionTerm("region", Transform.IDENTITY),)),
    ("identity(region)", (PartitionTerm("region", Transform.IDENTITY),)),
    ("day(event_time)", (PartitionTerm("event_time", Transform.DAY),)),
    ("hour(event_time)", (PartitionTerm("event_time", Transform.HOUR),)),
    ("day(_timestamp)", (KAFKA_DAY,)),
    ("hour(_timestamp)", (KAFKA_HOUR,)),
    ("day", (KAFKA_DAY,)),
    ("hour", (KAFKA_HOUR,)),
    ("bucket[16](customer_id)", (PartitionTerm("customer_id", Transform.BUCKET, 16),)),
    ("bucket[8](_key)", (PartitionTerm("_key", Transform.BUCKET, 8),)),
    ("bucket[3](_timestamp)", (PartitionTerm("_timestamp", Transform.BUCKET, 3),)),
    ("truncate[3](name)", (PartitionTerm("name", Transform.TRUNCATE, 3),)),
    ("bucket[1](x)", (PartitionTerm("x", Transform.BUCKET, 1),)),
    ("bucket[1000000](x)", (PartitionTerm("x", Transform.BUCKET, 1_000_000),)),
    ("_partition", (PartitionTerm("_partition", Transform.IDENTITY),)),
    (" region , bucket [ 16 ] ( customer_id ) ,\tday( event_time )\n", (
        PartitionTerm("region", Transform.IDENTITY), PartitionTerm("customer_id", Transform.BUCKET, 16),
        PartitionTerm("event_time", Transform.DAY))),
    ("day(_timestamp),region,bucket[4](c),truncate[2](n)", (
        KAFKA_DAY, PartitionTerm("region", Transform.IDENTITY), PartitionTerm("c", Transform.BUCKET, 4),
        PartitionTerm("n", Transform.TRUNCATE, 2))),
    ("day(x),hour(x)", (PartitionTerm("x", Transform.DAY), PartitionTerm("x", Transform.HOUR))),
    ("x,bucket[4](x),truncate[2](x)", (
        PartitionTerm("x", Transform.IDENTITY), PartitionTerm("x", Transform.BUCKET, 4),
        PartitionTerm("x", Transform.TRUNCATE, 2))),
])
def test_every_form_parses_to_its_terms(text: str, terms: tuple[PartitionTerm, ...]) -> None:
    assert PartitionSpec.parse(text).terms == terms


@pytest.mark.parametrize("text", ["none", "NONE", " None ", "", "  \t\n"])
def test_none_and_blank_are_unpartitioned(text: str) -> None:
    spec = PartitionSpec.parse(text)
    assert spec == PartitionSpec() and spec.terms == () and spec.text == "none" and str(spec) == "none"
    assert spec.required_fields() == "" and spec.sources == ()


@pytest.mark.parametrize(("text", "canonical"), [
    ("day", "day"), ("DAY", "day"), ("Hour", "hour"),
    ("day(_timestamp)", "day"), ("hour( _timestamp )", "hour"),
    ("identity(region)", "region"), ("region", "region"),
    ("bucket[016](c)", "bucket[16](c)"),
    (" truncate[ 3 ]( name ) ", "truncate[3](name)"),
    ("day(_timestamp),region", "day(_timestamp),region"),  # a Kafka-time term among others keeps its field
    ("region,day(_timestamp)", "region,day(_timestamp)"),  # order kept: it nests the directories
    ("bucket[4](c), identity(r)", "bucket[4](c),r"),
    ("r,bucket[4](c)", "r,bucket[4](c)"),
])
def test_the_canonical_text(text: str, canonical: str) -> None:
    spec = PartitionSpec.parse(text)
    assert spec.text == canonical and str(spec) == canonical
    assert PartitionSpec.parse(canonical) == spec


def test_two_texts_of_one_spec_share_the_canonical_text_and_order_matters() -> None:
    assert PartitionSpec.parse("identity(a) , bucket[2](b)") == PartitionSpec.parse("a,bucket[2](b)")
    assert PartitionSpec.parse("a,b") != PartitionSpec.parse("b,a")
    assert PartitionSpec.parse("a,b").text != PartitionSpec.parse("b,a").text


@pytest.mark.parametrize(("text", "message"), [
    ("year(x)", r"'year\(x\)' is not a term"),
    ("month(x)", "is not a term"),
    ("Bucket[4](x)", "is not a term"),
    ("DAY(x)", "is not a term"),
    ("foo(x)", "is not a term"),
    ("bucket[-1](x)", "is not a term"),
    ("bucket[x](y)", "is not a term"),
    ("day(x)(y)", "is not a term"),
    ("1x", "is not a term"),
    ("x.y", "is not a term"),
    ("x-y", "is not a term"),
    ("bucket(x)", r"bucket\[N\]\(x\) needs 1 <= N <= 1000000, got None"),
    ("truncate(x)", r"truncate\[W\]\(x\) needs 1 <= W <= 1000000, got None"),
    ("bucket[0](x)", "got 0$"),
    ("truncate[0](x)", r"truncate\[W\]\(x\) needs 1 <= W <= 1000000, got 0"),
    ("bucket[1000001](x)", "got 1000001$"),
    ("bucket[99999999999999999999999](x)", "got 99999999999999999999999$"),
    ("identity[3](x)", r"identity takes no \[parameter\]"),
    ("day[3](x)", r"day takes no \[parameter\]"),
    ("hour[1](x)", r"hour takes no \[parameter\]"),
    ("_topic", r"_topic cannot partition \(every topic is its own directory or table already\)"),
    ("bucket[4](_topic)", "_topic cannot partition"),
    ("_headers", r"_headers cannot partition \(headers are a list\)"),
    ("truncate[2](_headers)", "_headers cannot partition"),
    ("_timestamp", r"_timestamp is a timestamp: use day\(_timestamp\), hour\(_timestamp\) or bucket\[N\]\(_timestamp\)"),
    ("identity(_timestamp)", "_timestamp is a timestamp"),
    ("truncate[4](_timestamp)", r"truncate\[4\]\(_timestamp\): _timestamp is a timestamp"),
    ("x,x", "names a partition twice: x, x"),
    ("x,identity(x)", "names a partition twice"),
    ("bucket[2](x),bucket[3](x)", r"names a partition twice: bucket\[2\]\(x\), bucket\[3\]\(x\)"),
    ("x_bucket,bucket[2](x)", "names a partition twice"),  # both are the partition field x_bucket
    ("day(x),x_day", "names a partition twice"),
    ("_x,x", r"two terms would share a directory name \(x, x\)"),  # leading _ dropped: both x=
    ("__key_bucket,bucket[2](_key)", "share a directory name"),
    ("hour(_timestamp),day(_timestamp)", r"two terms would share a directory name \(dt, dt\)"),
    ("day(_timestamp),dt", r"share a directory name \(dt, dt\)"),
    ("a,b,c,d,e", f"has 5 terms; at most {MAX_TERMS}"),
    ("bucket[4](x", "unbalanced brackets"),
    ("bucket[4](x))", "unbalanced brackets"),
    ("bucket[4](x)]", "unbalanced brackets"),
    ("bucket[4(x)", "unbalanced brackets"),
    ("bucket]4[(x)", "unbalanced brackets"),  # a closing bracket before its opening one
    (")x(", "unbalanced brackets"),
    ("x,,y", "has an empty term"),
    (",x", "has an empty term"),
    ("x,", "has an empty term"),
    (" , ", "has an empty term"),
    ("_", "leaves no directory name once its leading _ are dropped"),
    ("__", "leaves no directory name"),
    ("day,region", r"day stands alone; with other terms write day\(_timestamp\)"),
    ("region,hour", r"hour stands alone; with other terms write hour\(_timestamp\)"),
    ("day,hour", "day stands alone"),
    ("day(_timestamp),day", "day stands alone"),
    ("none,region", "none stands alone"),
    ("region,none", "none stands alone"),
])
def test_every_refusal_is_a_config_error_naming_the_problem(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as refused:
        PartitionSpec.parse(text)
    assert str(refused.value).startswith("partition-by")
    assert "\n" not in str(refused.value)


def test_exactly_max_terms_is_accepted() -> None:
    spec = PartitionSpec.parse(",".join("abcd"[:MAX_TERMS]))
    assert len(spec.terms) == MAX_TERMS


def test_terms_refuse_what_the_parser_refuses() -> None:
    with pytest.raises(ConfigurationError, match="not a column name"):
        PartitionTerm("a b", Transform.IDENTITY)
    with pytest.raises(ConfigurationError, match="not a column name"):
        PartitionTerm("", Transform.IDENTITY)
    with pytest.raises(ConfigurationError, match="needs 1 <= N"):
        PartitionTerm("x", Transform.BUCKET)
    with pytest.raises(ConfigurationError, match="takes no"):
        PartitionTerm("x", Transform.IDENTITY, 3)
    with pytest.raises(ConfigurationError, match="at most 4"):
        PartitionSpec(tuple(PartitionTerm(name, Transform.IDENTITY) for name in "abcde"))


def test_transforms_take_parameters_kinds_and_suffixes() -> None:
    assert [t for t in Transform if t.takes_parameter] == [Transform.BUCKET, Transform.TRUNCATE]
    assert {t: t.suffix for t in Transform} == {
        Transform.IDENTITY: "", Transform.DAY: "_day", Transform.HOUR: "_hour",
        Transform.BUCKET: "_bucket", Transform.TRUNCATE: "_trunc",
    }
    assert {t: set(t.kinds) for t in Transform} == {
        Transform.IDENTITY: {"integer", "string", "boolean", "date"},
        Transform.DAY: {"timestamp", "date"},
        Transform.HOUR: {"timestamp"},
        Transform.BUCKET: {"integer", "string", "binary", "date", "timestamp"},
        Transform.TRUNCATE: {"integer", "string", "binary"},
    }


@pytest.mark.parametrize(("text", "required"), [
    ("none", ""),
    ("day", ""),
    ("hour", ""),
    ("day(_timestamp),region", "region:integer|string|boolean|date<=82"),
    ("region", "region:integer|string|boolean|date<=82"),
    ("bucket[4](c)", "c:integer|string|binary|date|timestamp"),
    ("truncate[3](n)", "n:integer|string|binary"),
    ("day(t)", "t:date|timestamp"),
    ("hour(t)", "t:timestamp"),
    ("day(t),hour(t)", "t:timestamp"),  # the kinds every term over t takes
    ("x,truncate[2](x)", "x:integer|string<=84"),  # identity: bounded to fit a file name
    ("bucket[4](x),truncate[2](x)", "x:integer|string|binary"),
    ("bucket[4](x),day(x)", "x:date|timestamp"),
    ("x,day(x)", "x:date<=84"),
    ("region,bucket[4](c),day(t)", "region:integer|string|boolean|date<=82,c:integer|string|binary|date|timestamp,"
                                   "t:date|timestamp"),
    ("bucket[8](_key)", "_key:integer|string|binary|date|timestamp"),
    ("_partition", "_partition:integer|string|boolean|date<=81"),  # the key drops the _
    # a null _timestamp has a partition under day and hour (the legacy default), none under bucket
    ("bucket[4](_timestamp)", "_timestamp:integer|string|binary|date|timestamp"),
    ("day(_timestamp),bucket[4](_timestamp)", "_timestamp:date|timestamp"),
])
def test_required_fields_of_a_spec(text: str, required: str) -> None:
    spec = PartitionSpec.parse(text)
    assert spec.required_fields() == required
    parsed = parse_required_fields(required)  # the source's property takes it
    assert [f.text() for f in parsed] == [part for part in required.split(",") if part]


def test_a_field_no_kind_suits_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="no type of x suits every term over it"):
        PartitionSpec.parse("hour(x),truncate[2](x)").required_fields()
    with pytest.raises(ConfigurationError, match="no type of x suits"):
        PartitionSpec.parse("x,hour(x)").required_fields()


def test_sources_are_each_column_once_in_order() -> None:
    assert PartitionSpec.parse("b,bucket[2](a),truncate[3](b),day(_timestamp)").sources == ("b", "a", "_timestamp")


@pytest.mark.parametrize(("text", "keys", "names"), [
    ("day", ["dt"], ["_timestamp_day"]),
    ("hour", ["dt"], ["_timestamp_hour"]),
    ("region", ["region"], ["region"]),
    ("bucket[8](_key)", ["key_bucket"], ["_key_bucket"]),
    ("truncate[3](name)", ["name_trunc"], ["name_trunc"]),
    ("day(event_time),hour(event_time)", ["event_time_day", "event_time_hour"], ["event_time_day", "event_time_hour"]),
    ("_partition", ["partition"], ["_partition"]),
    ("__odd", ["odd"], ["__odd"]),
    ("bucket[2](_timestamp)", ["timestamp_bucket"], ["_timestamp_bucket"]),
    ("day(_timestamp),_key", ["dt", "key"], ["_timestamp_day", "_key"]),
])
def test_directory_keys_drop_leading_underscores_and_kafka_time_is_dt(
    text: str, keys: list[str], names: list[str],
) -> None:
    spec = PartitionSpec.parse(text)
    assert [t.directory_key for t in spec.terms] == keys
    assert [t.name for t in spec.terms] == names
    assert [t.is_kafka_time for t in spec.terms] == [t.source == "_timestamp" and t.transform in
                                                     (Transform.DAY, Transform.HOUR) for t in spec.terms]


# --- the round trip ------------------------------------------------------------------------------

FIELDS = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,6}", fullmatch=True).filter(lambda f: f.lower() not in ("day", "hour", "none"))
METADATA = st.sampled_from(["_key", "_partition", "_offset", "_timestamp"])
PARAMETERS = st.integers(1, 1_000_000)


@st.composite
def terms(draw: st.DrawFn) -> PartitionTerm:
    source = draw(st.one_of(FIELDS, METADATA))
    transforms = [Transform.DAY, Transform.HOUR, Transform.BUCKET] if source == "_timestamp" else list(Transform)
    transform = draw(st.sampled_from(transforms))
    return PartitionTerm(source, transform, draw(PARAMETERS) if transform.takes_parameter else None)


@st.composite
def specs(draw: st.DrawFn) -> PartitionSpec:
    chosen = draw(st.lists(terms(), max_size=MAX_TERMS, unique_by=(lambda t: t.name, lambda t: t.directory_key)))
    return PartitionSpec(tuple(chosen))


def _spaced(text: str, blanks: list[str]) -> str:
    """``text`` with a blank after each character (the grammar ignores them)."""
    return "".join(char + blanks[i % len(blanks)] for i, char in enumerate(text))


@settings(max_examples=300, deadline=None)
@given(spec=specs(), blanks=st.lists(st.sampled_from(["", " ", "\t", "\n"]), min_size=1, max_size=5))
def test_parse_of_the_canonical_text_is_the_spec(spec: PartitionSpec, blanks: list[str]) -> None:
    assert PartitionSpec.parse(spec.text) == spec
    assert PartitionSpec.parse(_spaced(spec.text, blanks)) == spec
    assert PartitionSpec.parse(spec.text).text == spec.text
    if spec.terms:
        keys = [t.directory_key for t in spec.terms]
        assert all(k and not k.startswith("_") for k in keys) and len(set(keys)) == len(keys)
