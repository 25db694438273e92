"""Schema evolution of an Iceberg table by the files of one epoch, per Iceberg's rules.

:func:`plan_evolution` is the whole decision, pure: given the table's schema and the schemas of the
epoch's files (several registry schema versions may be mixed in one epoch), either the steps that
evolve the table once to the union of them all, or the first :class:`Conflict`. The rules:

- a field the table lacks (at any depth of a struct, also inside a list's element or a map's value)
  is added, optional, with its whole subtree optional: the rows already in the table have no value;
- a wider type widens the column: ``int -> long``, ``float -> double``, ``decimal(P,S) ->
  decimal(P',S)`` with ``P' > P`` (at any depth; a map's key type never changes);
- a narrower type is taken as it is: the file of an older writer version keeps its type and Iceberg
  readers (pyiceberg, DuckDB) read it widened by field id, so its values come back unchanged;
- a field the file lacks or holds optional makes a required field optional (old rows keep their
  values, the file's rows read as null), except an identifier field (an upsert key), which stays
  required (upsert mode fills the keys of every row);
- any other change (``string -> int``, a decimal's scale, a precision that shrinks while the scale
  differs, a struct that becomes a primitive, a list that becomes a map) is a :class:`Conflict`:
  one line naming the field's full path and both types, and nothing of the epoch is committed.

:func:`apply_evolution` stages the steps on a pyiceberg ``UpdateSchema`` inside the epoch's
transaction (I/O free itself: the transaction commits them with the epoch's files).
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from pyiceberg.schema import Schema
from pyiceberg.table.update.schema import UpdateSchema
from pyiceberg.types import (
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    PrimitiveType,
    StructType,
)

__all__ = [
    "AddField",
    "Conflict",
    "Evolution",
    "MakeOptional",
    "Step",
    "WidenField",
    "apply_evolution",
    "plan_evolution",
    "widens",
]


@dataclass(frozen=True)
class AddField:
    """Add the optional field ``path`` (its parents exist in the table) of type ``field_type``
    (field ids in ``field_type`` are placeholders: the table assigns fresh ones)."""

    path: tuple[str, ...]
    field_type: IcebergType


@dataclass(frozen=True)
class WidenField:
    """Widen the primitive field ``path`` from ``old`` to ``new`` (:func:`widens` holds)."""

    path: tuple[str, ...]
    old: PrimitiveType
    new: PrimitiveType


@dataclass(frozen=True)
class MakeOptional:
    """Make the required field ``path`` optional."""

    path: tuple[str, ...]


Step = AddField | WidenField | MakeOptional


@dataclass(frozen=True)
class Conflict:
    """A field the table cannot take: its full path (``a.b`` in a struct, ``l.element``,
    ``m.value``), its type in the table (as the epoch's earlier files evolve it when ``evolved``)
    and in the file, and which file (index in the files given to :func:`plan_evolution`)."""

    path: str
    table_type: str
    file_type: str
    file_index: int
    evolved: bool = False

    def describe(self, table: str, source: str, again: str) -> str:
        """The one line: ``iceberg table <table> cannot take <source>: column <path> is <type> in the
        table but <type> in <again>`` (``again``: how the line names the source a second time,
        ``the file`` for ``file <path>``)."""
        where = "in the table as this epoch's other files evolve it" if self.evolved else "in the table"
        return (f"iceberg table {table} cannot take {source}: column {self.path} is {self.table_type} "
                f"{where} but {self.file_type} in {again}")


@dataclass(frozen=True)
class Evolution:
    """What an epoch's files do to a table: ``steps`` (empty: the schema stays) or ``conflict``
    (then ``steps`` is empty and the epoch must not be committed)."""

    steps: tuple[Step, ...] = ()
    conflict: Conflict | None = None


def widens(old: IcebergType, new: IcebergType) -> bool:
    """Whether Iceberg may change a column of type ``old`` to the strictly wider ``new``:
    ``int -> long``, ``float -> double``, ``decimal(P,S) -> decimal(P',S)`` with ``P' > P``."""
    if isinstance(old, IntegerType):
        return isinstance(new, LongType)
    if isinstance(old, FloatType):
        return isinstance(new, DoubleType)
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        return new.scale == old.scale and new.precision > old.precision
    return False


# --- the working tree of one plan ----------------------------------------------------------------


@dataclass
class _Node:
    """One field of the table as the epoch's files evolve it (mutable while a plan is made)."""

    name: str
    field_type: IcebergType  # a primitive's current type; a nested field's original (its kind)
    required: bool
    new: bool
    identifier: bool = False
    map_key: bool = False
    children: dict[str, _Node] = field(default_factory=dict)
    original_type: IcebergType | None = None
    original_required: bool = False


def _child_fields(field_type: IcebergType) -> list[NestedField]:
    """A nested type's children as fields named as Iceberg's paths name them."""
    if isinstance(field_type, StructType):
        return list(field_type.fields)
    if isinstance(field_type, ListType):
        return [field_type.element_field]
    if isinstance(field_type, MapType):
        return [field_type.key_field, field_type.value_field]
    return []


def _kind(field_type: IcebergType) -> str:
    return "primitive" if field_type.is_primitive else type(field_type).__name__


def _node(nested: NestedField, *, new: bool, map_key: bool = False,
          identifiers: frozenset[int] = frozenset()) -> _Node:
    """A node for ``nested``; a new one (and its whole subtree, but a map's key) is optional."""
    required = nested.required and (not new or map_key)
    node = _Node(nested.name, nested.field_type, required, new, identifier=nested.field_id in identifiers,
                 map_key=map_key, original_type=nested.field_type, original_required=nested.required)
    is_map = isinstance(nested.field_type, MapType)
    for child in _child_fields(nested.field_type):
        node.children[child.name] = _node(child, new=new, map_key=is_map and child.name == "key",
                                          identifiers=identifiers)
    return node


def _shown(field_type: IcebergType) -> str:
    """A type as a conflict line shows it: Iceberg's names without field ids."""
    if isinstance(field_type, StructType):
        return "struct<" + ", ".join(f"{child.name}: {_shown(child.field_type)}" for child in field_type.fields) + ">"
    if isinstance(field_type, ListType):
        return f"list<{_shown(field_type.element_type)}>"
    if isinstance(field_type, MapType):
        return f"map<{_shown(field_type.key_type)}, {_shown(field_type.value_type)}>"
    return str(field_type)


def _merge(node: _Node, incoming: NestedField, path: str, index: int) -> Conflict | None:
    """Fold the file's field ``incoming`` into ``node``; the first conflict met, if any (then
    ``node`` is left half-merged: the plan is abandoned)."""
    if incoming.optional and node.required and not node.identifier:
        node.required = False
    old, new = node.field_type, incoming.field_type
    if old.is_primitive and new.is_primitive:
        if old == new or widens(new, old):
            return None  # equal, or an older writer's narrower type: read widened by field id
        if widens(old, new) and (node.new or not node.map_key):  # Iceberg never changes a map's key
            node.field_type = new
            return None
        return Conflict(path, str(old), str(new), index, evolved=node.new or old != node.original_type)
    if _kind(old) != _kind(new):
        shown = _shown(_build_type(node, itertools.count(1)))
        return Conflict(path, shown, _shown(new), index, evolved=node.new)
    return _merge_children(node, _child_fields(new), f"{path}.", index, struct=isinstance(old, StructType))


def _merge_children(parent: _Node, fields: list[NestedField], prefix: str, index: int, *,
                    struct: bool) -> Conflict | None:
    """Fold a file's ``fields`` into the children of ``parent`` (a struct's fields, or a list's
    element, a map's key and value); the first conflict met, if any."""
    present = set()
    for child in fields:
        present.add(child.name)
        known = parent.children.get(child.name)
        if known is None:  # a new field of a struct (a list's element and a map's key, value always exist)
            parent.children[child.name] = _node(child, new=True)
            continue
        conflict = _merge(known, child, f"{prefix}{child.name}", index)
        if conflict is not None:
            return conflict
    if struct:
        _absent(parent, present)
    return None


def _absent(parent: _Node, present: set[str]) -> None:
    """The fields of ``parent`` the file lacks become optional (an identifier field stays required)."""
    for name, child in parent.children.items():
        if name not in present and not child.identifier:
            child.required = False


def _build_type(node: _Node, ids: Iterator[int]) -> IcebergType:
    """The Iceberg type of ``node`` as evolved, with placeholder field ids from ``ids``."""
    if isinstance(node.field_type, StructType):
        return StructType(*[
            NestedField(next(ids), child.name, _build_type(child, ids), required=child.required)
            for child in node.children.values()
        ])
    if isinstance(node.field_type, ListType):
        element = node.children["element"]
        return ListType(next(ids), _build_type(element, ids), element_required=element.required)
    if isinstance(node.field_type, MapType):
        key, value = node.children["key"], node.children["value"]
        return MapType(next(ids), _build_type(key, ids), next(ids), _build_type(value, ids),
                       value_required=value.required)
    return node.field_type


def _steps(parent: _Node, prefix: tuple[str, ...], ids: Iterator[int]) -> Iterator[Step]:
    for child in parent.children.values():
        path = (*prefix, child.name)
        if child.new:
            yield AddField(path, _build_type(child, ids))
            continue
        if child.field_type.is_primitive and child.field_type != child.original_type:
            assert isinstance(child.original_type, PrimitiveType) and isinstance(child.field_type, PrimitiveType)
            yield WidenField(path, child.original_type, child.field_type)
        if child.original_required and not child.required:
            yield MakeOptional(path)
        yield from _steps(child, path, ids)


def plan_evolution(table: Schema, files: Sequence[Schema]) -> Evolution:
    """The evolution of ``table`` that takes every schema of ``files`` (the module's rules), or
    the first conflict met, files in order. Pure."""
    identifiers = frozenset(table.identifier_field_ids)
    root = _Node("", table.as_struct(), True, False)
    for nested in table.fields:
        root.children[nested.name] = _node(nested, new=False, identifiers=identifiers)
    for index, schema in enumerate(files):
        conflict = _merge_children(root, list(schema.fields), "", index, struct=True)
        if conflict is not None:
            return Evolution(conflict=conflict)
    return Evolution(steps=tuple(_steps(root, (), itertools.count(1))))


def apply_evolution(update: UpdateSchema, steps: Sequence[Step]) -> None:
    """Stage ``steps`` (from :func:`plan_evolution` on ``update``'s schema) on ``update``."""
    for step in steps:
        if isinstance(step, AddField):
            update.add_column(step.path, step.field_type, required=False)
        elif isinstance(step, WidenField):
            update.update_column(step.path, field_type=step.new)
        else:
            update.make_column_optional(step.path)
