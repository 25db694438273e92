"""The lake settings: table format, partition granularity, the Iceberg catalog and names."""
from __future__ import annotations

import pytest

from laminar_kafka.cluster.config import settings_from
from laminar_kafka.cluster.config_file import passthrough_tables
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.lake.settings import (
    IcebergSettings,
    TableFormat,
    TableLocation,
    table_name_of,
)
from laminar_kafka.errors import ConfigurationError

BASE = {"bootstrap": "k:9092", "topic": "orders.v1", "output": "/tmp/out"}


def test_defaults_are_a_daily_parquet_tree() -> None:
    s = settings_from(BASE, {}, {})
    assert s.lake_format is TableFormat.PARQUET and s.partitioning == PartitionSpec.parse("day")


def test_iceberg_names_default_to_pipeline_and_topic() -> None:
    s = settings_from({**BASE, "pipeline": "sales-eu"}, {}, {"table-format": "iceberg"})
    ice = s.iceberg_settings()
    assert ice.namespace == "sales_eu" and ice.catalog_uri is None
    assert ice.table_of("orders.v1") == "orders_v1" == table_name_of("orders.v1")


def test_iceberg_tables_go_to_the_output_unless_the_catalog_places_them() -> None:
    s = settings_from(BASE, {}, {"table-format": "iceberg"})
    assert s.iceberg_settings().table_location is TableLocation.OUTPUT
    s = settings_from(BASE, {"LAMINAR_TABLE_LOCATION": "catalog"}, {"table-format": "iceberg"})
    assert s.iceberg_settings().table_location is TableLocation.CATALOG


def test_iceberg_table_and_env_properties() -> None:
    env = {"LAMINAR_ICEBERG__S3_ENDPOINT": "http://127.0.0.1:9000", "LAMINAR_TABLE": "orders"}
    s = settings_from({**BASE, "table-format": "iceberg", "iceberg": {"token": "t0ps3cret"}}, env, {})
    assert s.iceberg_settings().table_of("orders.v1") == "orders"
    assert dict(s.iceberg) == {"s3.endpoint": "http://127.0.0.1:9000", "token": "t0ps3cret"}
    assert "t0ps3cret" not in repr(s)


@pytest.mark.parametrize(("values", "message"), [
    ({"table-format": "delta"}, "table-format='delta': expected one of parquet, iceberg"),
    ({"partition-by": "week"}, "partition-by reads week, a payload field: format=raw has only value"),
    ({"partition-by": "month(ts)"}, "partition-by: 'month(ts)' is not a term"),
    ({"partition-by": "bucket(customer)"}, "needs 1 <= N <= 1000000, got None"),
    ({"partition-by": "day,region"}, "partition-by: day stands alone; with other terms write day(_timestamp)"),
    ({"partition-by": "bucket[8](_key)"}, "partition-by reads _key: set include-key = true"),
    ({"partition-by": "_key", "include-key": "true"},
     "partition-by _key: _key is binary (key-format raw), but identity takes integer, string, boolean, date"),
    ({"partition-by": "day(_offset)"}, "partition-by day(_offset): _offset is integer, but day takes timestamp, date"),
    ({"partition-by": "day(ts)", "format": "json", "json-schema": "id:int64"},
     "partition-by day(ts): json-schema: the record has no field ts"),
    ({"partition-by": "id, hour(ts)", "format": "json", "json-schema": "id:int64,ts:string"},
     "partition-by id,hour(ts): json-schema: field ts is string, expected timestamp"),
    ({"table": "t"}, "table goes with table-format=iceberg"),
    ({"catalog-uri": "sqlite:////x.db"}, "catalog-uri goes with table-format=iceberg"),
    ({"table-format": "iceberg", "catalog-uri": "thrift://hive:9083"}, "catalog-uri 'thrift://hive:9083' is not supported"),
    ({"table-format": "iceberg", "output": "s3://bucket/lake", "state-dir": "/tmp/s"}, "needs catalog-uri"),
    ({"table-format": "iceberg", "topic": "a,b", "table": "t"}, "single topic"),
    ({"table-format": "iceberg", "table": "bad-name"}, "iceberg table 'bad-name' must match"),
    ({"table-location": "catalog"}, "table-location goes with table-format=iceberg"),
    ({"table-format": "iceberg", "table-location": "bucket"}, "table-location='bucket': expected one of output, catalog"),
])
def test_bad_lake_settings_name_the_setting(values: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        settings_from({**BASE, **values}, {}, {})


def test_iceberg_table_in_the_file_is_not_a_setting() -> None:
    tables = passthrough_tables({"iceberg": {"s3": {"region": "eu-west-1"}}}, {})
    assert tables.iceberg == {"s3.region": "eu-west-1"}
    with pytest.raises(ConfigurationError):
        IcebergSettings(namespace="a.b")


def test_iceberg_fileio_reaches_the_same_s3_as_pyarrow() -> None:
    from laminar_kafka.cluster.lake.iceberg.tables import s3_properties_from

    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_DEFAULT_REGION": "eu-west-1", "AWS_SECRET_ACCESS_KEY": "s"}
    assert s3_properties_from(env) == {"s3.endpoint": "http://127.0.0.1:9000", "s3.region": "eu-west-1"}
    assert s3_properties_from({**env, "AWS_ENDPOINT_URL_S3": "http://s3:1", "AWS_REGION": "us-east-2"}) == {
        "s3.endpoint": "http://s3:1", "s3.region": "us-east-2"}
    assert s3_properties_from({}) == {}
