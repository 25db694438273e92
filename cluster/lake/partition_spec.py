"""The ``partition-by`` setting: which fields, under which transforms, lay out a pipeline's lake.

Pure, no I/O. The grammar (blanks ignored)::

    partition-by := "none" | "day" | "hour" | term ("," term)*
    term         := field | "identity(" field ")" | "day(" field ")" | "hour(" field ")"
                  | "bucket[" N "](" field ")" | "truncate[" W "](" field ")"

``day`` and ``hour`` alone mean ``day(_timestamp)`` and ``hour(_timestamp)``: the record's Kafka
timestamp, the layout every pipeline had before fields (``dt=YYYY-MM-DD[/hour=HH]``, a null
timestamp under ``__HIVE_DEFAULT_PARTITION__``). A field is a top-level column: a payload field
(``format=json`` and the registry formats) or a metadata column (``_key``, ``_partition``,
``_timestamp``...). Terms nest directories in their order, and the transforms are Iceberg's:

==================  ====================================  =========================  ==================
term                the field's kinds                     Parquet directory          Iceberg field
==================  ====================================  =========================  ==================
``f``               integer, string, boolean, date        ``f=<value>``              ``f`` identity
``day(f)``          timestamp, date                       ``f_day=YYYY-MM-DD``       ``f_day`` day
``hour(f)``         timestamp                             ``f_hour=YYYY-MM-DD-HH``   ``f_hour`` hour
``bucket[N](f)``    integer, string, binary, date,        ``f_bucket=<0..N-1>``      ``f_bucket``
                    timestamp                                                        bucket[N]
``truncate[W](f)``  integer, string, binary               ``f_trunc=<value>``        ``f_trunc``
                                                                                     truncate[W]
==================  ====================================  =========================  ==================

A directory name drops the field's leading underscores (readers skip ``_``-prefixed directories:
``bucket[8](_key)`` is ``key_bucket=3``), except that ``day(_timestamp)`` and ``hour(_timestamp)``
keep ``dt=`` and ``hour=``. Values in directory names are percent-encoded outside
``[A-Za-z0-9._~-]`` (Hive, Spark, pyarrow and DuckDB decode them). A record whose field is null or
absent, or whose field has a type of another kind, is a bad record (the source's ``required-fields``,
:meth:`PartitionSpec.required_fields`), never a row in a wrong directory; ``_timestamp`` under
``day``/``hour`` is the one field allowed null (its legacy default partition).

The spec is pinned with the pipeline (:mod:`laminar_kafka.cluster.lake.pins`, by
:attr:`PartitionSpec.text`), so a node started with another one is refused; an Iceberg table whose
spec differs is refused naming both (:func:`laminar_kafka.cluster.lake.iceberg.partitions.check_partitioning`).
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.config.choices import METADATA_COLUMNS

__all__ = ["MAX_NAME_BYTES", "MAX_TERMS", "PartitionSpec", "PartitionTerm", "Transform"]

#: terms a spec may have (each nests a directory level)
MAX_TERMS = 4
#: the widest bucket count and truncation width accepted
MAX_PARAMETER = 1_000_000
#: the longest directory name file systems take (ext4, xfs, APFS: 255 bytes)
MAX_NAME_BYTES = 255
TIMESTAMP_FIELD = "_timestamp"
#: metadata columns no term may use: the topic names the table already, headers are lists
_UNUSABLE = {"_topic": "every topic is its own directory or table already", "_headers": "headers are a list"}
_FIELD = r"[A-Za-z_][A-Za-z0-9_]*"
_TERM = re.compile(
    rf"(?:(?P<transform>identity|day|hour|bucket|truncate)(?:\[(?P<parameter>\d+)\])?\((?P<inner>{_FIELD})\)"
    rf"|(?P<bare>{_FIELD}))"
)


class Transform(enum.Enum):
    """An Iceberg partition transform."""

    IDENTITY = "identity"
    DAY = "day"
    HOUR = "hour"
    BUCKET = "bucket"
    TRUNCATE = "truncate"

    @property
    def takes_parameter(self) -> bool:
        return self in (Transform.BUCKET, Transform.TRUNCATE)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The value kinds (:class:`~laminar_kafka.kafka_source.decode.required_fields.ValueKind`
        values) a field under this transform may have."""
        return _KINDS[self]

    @property
    def suffix(self) -> str:
        """What the partition field's name adds to the source field's (Iceberg's default names)."""
        return _SUFFIXES[self]


_KINDS = {
    Transform.IDENTITY: ("integer", "string", "boolean", "date"),
    Transform.DAY: ("timestamp", "date"),
    Transform.HOUR: ("timestamp",),
    Transform.BUCKET: ("integer", "string", "binary", "date", "timestamp"),
    Transform.TRUNCATE: ("integer", "string", "binary"),
}
_SUFFIXES = {Transform.IDENTITY: "", Transform.DAY: "_day", Transform.HOUR: "_hour",
             Transform.BUCKET: "_bucket", Transform.TRUNCATE: "_trunc"}


@dataclass(frozen=True)
class PartitionTerm:
    """One level of the layout: ``transform`` of the column ``source`` (``parameter``: the bucket
    count N or the truncation width W, else ``None``)."""

    source: str
    transform: Transform
    parameter: int | None = None

    def __post_init__(self) -> None:
        if not re.fullmatch(_FIELD, self.source):
            raise ConfigurationError(f"partition-by: {self.source!r} is not a column name")
        if self.source in _UNUSABLE:
            raise ConfigurationError(f"partition-by: {self.source} cannot partition ({_UNUSABLE[self.source]})")
        if self.transform.takes_parameter:
            word = "N" if self.transform is Transform.BUCKET else "W"
            if self.parameter is None or not 1 <= self.parameter <= MAX_PARAMETER:
                raise ConfigurationError(f"partition-by: {self.transform.value}[{word}]({self.source}) needs "
                                  f"1 <= {word} <= {MAX_PARAMETER}, got {self.parameter}")
        elif self.parameter is not None:
            raise ConfigurationError(f"partition-by: {self.transform.value} takes no [parameter]")
        if self.source == TIMESTAMP_FIELD and self.transform not in (Transform.DAY, Transform.HOUR, Transform.BUCKET):
            raise ConfigurationError(f"partition-by: {self.text}: {TIMESTAMP_FIELD} is a timestamp: use day({TIMESTAMP_FIELD}), "
                              f"hour({TIMESTAMP_FIELD}) or bucket[N]({TIMESTAMP_FIELD})")
        if not self.directory_key:
            raise ConfigurationError(f"partition-by: {self.source!r} leaves no directory name once its leading _ are dropped")

    @property
    def text(self) -> str:
        if self.transform is Transform.IDENTITY:
            return self.source
        parameter = "" if self.parameter is None else f"[{self.parameter}]"
        return f"{self.transform.value}{parameter}({self.source})"

    @property
    def name(self) -> str:
        """The partition field's name (Iceberg's default: ``source`` plus the transform's suffix)."""
        return self.source + self.transform.suffix

    @property
    def max_value_bytes(self) -> int:
        """The longest text (UTF-8 bytes) whose directory ``key=value`` surely fits a file name of
        :data:`MAX_NAME_BYTES` (every byte percent-encoded, 3 bytes each): an identity term's values
        longer than this are bad records (``required-fields`` ``<=N``)."""
        return (MAX_NAME_BYTES - len(self.directory_key) - 1) // 3

    @property
    def is_kafka_time(self) -> bool:
        """A day or hour of ``_timestamp``: the legacy ``dt=`` / ``hour=`` directories."""
        return self.source == TIMESTAMP_FIELD and self.transform in (Transform.DAY, Transform.HOUR)

    @property
    def directory_key(self) -> str:
        """The ``key`` of this level's ``key=value`` directories (for a Kafka-time term: ``dt``)."""
        if self.is_kafka_time:
            return "dt"
        return self.name.lstrip("_")


@dataclass(frozen=True)
class PartitionSpec:
    """An ordered tuple of terms (empty: unpartitioned)."""

    terms: tuple[PartitionTerm, ...] = ()

    def __post_init__(self) -> None:
        if len(self.terms) > MAX_TERMS:
            raise ConfigurationError(f"partition-by has {len(self.terms)} terms; at most {MAX_TERMS}")
        names = [t.name for t in self.terms]
        if len(set(names)) != len(names):
            raise ConfigurationError(f"partition-by names a partition twice: {', '.join(t.text for t in self.terms)}")
        keys = [t.directory_key for t in self.terms]
        if len(set(keys)) != len(keys):
            raise ConfigurationError(f"partition-by: two terms would share a directory name ({', '.join(keys)})")

    @classmethod
    def parse(cls, text: str) -> PartitionSpec:
        """Parse a ``partition-by`` value; raises :class:`ConfigurationError` naming what is wrong."""
        compact = re.sub(r"\s+", "", text)
        if compact.lower() == "none" or compact == "":
            return cls(())
        if compact.lower() in ("day", "hour"):
            return cls((PartitionTerm(TIMESTAMP_FIELD, Transform(compact.lower())),))
        terms = []
        for item in _split_terms(compact, text):
            match = _TERM.fullmatch(item)
            if match is None:
                raise ConfigurationError(
                    f"partition-by: {item!r} is not a term (field, identity(f), day(f), hour(f), bucket[N](f) "
                    f"or truncate[W](f))")
            if match["bare"] is not None:
                if match["bare"] in ("day", "hour", "none"):
                    raise ConfigurationError(f"partition-by: {match['bare']} stands alone; with other terms write "
                                      f"{match['bare']}(_timestamp)" if match["bare"] != "none" else
                                      "partition-by: none stands alone")
                terms.append(PartitionTerm(match["bare"], Transform.IDENTITY))
                continue
            parameter = int(match["parameter"]) if match["parameter"] is not None else None
            terms.append(PartitionTerm(match["inner"], Transform(match["transform"]), parameter))
        return cls(tuple(terms))

    @property
    def text(self) -> str:
        """The canonical text (what is pinned): ``none``, ``day``, ``hour``, or the terms joined by
        ``,``. Two texts of one spec give the same canonical text."""
        if not self.terms:
            return "none"
        if len(self.terms) == 1 and self.terms[0].is_kafka_time:
            return self.terms[0].transform.value
        return ",".join(t.text for t in self.terms)

    @property
    def sources(self) -> tuple[str, ...]:
        """The columns the terms read, in order, each once."""
        return tuple(dict.fromkeys(t.source for t in self.terms))

    def required_fields(self) -> str:
        """The source's ``required-fields`` for this spec: each source column but a ``_timestamp``
        only Kafka-time terms read (its null has a partition there; under ``bucket[N]`` it has none),
        with the kinds every term over it accepts (``""``: none required)."""
        parts = []
        for source in self.sources:
            if all(t.is_kafka_time for t in self.terms if t.source == source):
                continue
            kinds = [k for k in _ALL_KINDS if all(k in t.transform.kinds for t in self.terms if t.source == source)]
            if not kinds:
                raise ConfigurationError(f"partition-by: no type of {source} suits every term over it")
            bounds = [t.max_value_bytes for t in self.terms if t.source == source and t.transform is Transform.IDENTITY]
            parts.append(f"{source}:{'|'.join(kinds)}" + (f"<={min(bounds)}" if bounds else ""))
        return ",".join(parts)

    def check_sources(self, *, record_format: str, json_schema: str = "", include_key: bool = False,
                      key_format: str = "raw") -> None:
        """Raise :class:`ConfigurationError` (one line) when a column the terms read is one records of these
        settings never have, or have of a type a term's transform does not take: ``_key`` without
        ``include-key`` (or binary, ``key-format raw``, under identity), ``day(_offset)``, a payload
        field under ``format=raw`` (only ``value``), or a field ``json_schema`` (``format=json``)
        lacks or types otherwise. Registry formats (and registry keys) are checked record by record
        (the source's ``required-fields``)."""
        metadata_kinds = {"_partition": "integer", "_offset": "integer", "_timestamp": "timestamp",
                          "_key": {"raw": "binary", "string": "string"}.get(key_format)}
        for term in self.terms:
            source = term.source
            if source == "_key" and not include_key:
                raise ConfigurationError("partition-by reads _key: set include-key = true")
            if source not in METADATA_COLUMNS and record_format == "raw" and source != "value":
                raise ConfigurationError(f"partition-by reads {source}, a payload field: format=raw has only value "
                                  "(use format=json or a registry format)")
            kind = metadata_kinds.get(source)
            if kind is not None and kind not in term.transform.kinds:
                raise ConfigurationError(f"partition-by {term.text}: {source} is {kind}"
                                  f"{' (key-format ' + key_format + ')' if source == '_key' else ''}, but "
                                  f"{term.transform.value} takes {', '.join(term.transform.kinds)}")
        if record_format != "json" or not json_schema:
            return
        from laminar_kafka.kafka_source.config.values import parse_json_schema
        from laminar_kafka.kafka_source.decode.required_fields import parse_required_fields, schema_problem

        schema = parse_json_schema(json_schema)
        for required in parse_required_fields(self.required_fields()):
            problem = None if required.name in METADATA_COLUMNS else schema_problem(schema, required)
            if problem is not None:
                raise ConfigurationError(f"partition-by {self.text}: json-schema: {problem}")

    def __str__(self) -> str:
        return self.text


_ALL_KINDS = ("integer", "string", "binary", "boolean", "date", "timestamp")


def _split_terms(compact: str, text: str) -> list[str]:
    """``compact`` cut at the commas outside parentheses and brackets."""
    from laminar_kafka.kafka_source.config.type_text import split_top_level

    try:
        items = split_top_level(compact)
    except ConfigurationError:
        raise ConfigurationError(f"partition-by={text!r}: unbalanced brackets") from None
    if any(not item for item in items):
        raise ConfigurationError(f"partition-by={text!r} has an empty term")
    return items
