"""``.proto`` text to a ``FileDescriptorProto``, without protoc: for registries that serve Protobuf
schemas as the text they were registered with.

Why: the Confluent registry answers ``GET /schemas/ids/<id>?format=serialized`` with the base64
``FileDescriptorProto`` whatever the producer registered, and confluent-kafka's Python client (like
this package) decodes only that. Apicurio's Confluent-compatible API ignores ``format=serialized``
and serves the schema as registered: base64 from confluent-kafka's Python ``ProtobufSerializer``, but
``.proto`` text from Java's ``KafkaProtobufSerializer``, from the registry's UI or from a REST call.
:func:`file_descriptor_proto` accepts both.

What the text parser covers (proto2 and proto3): ``syntax``, ``package``, ``import`` (``public``,
``weak``), messages with nested messages and enums, scalar and named field types (names are kept as
written; the descriptor pool resolves them in scope, as it does for protoc's output), ``optional``
(proto3 presence: a synthetic oneof), ``required``, ``repeated``, ``map<K, V>``, ``oneof``, enums
(negative and hex values). Options, ``reserved``, ``extensions``, ``extend`` and ``service`` blocks
are read and dropped (they do not change how a record decodes); field defaults are dropped (an unset
field with presence reads as null). ``group`` fields and ``edition`` files raise
:class:`ProtoTextError`.

Map entry types are appended after a message's declared nested types, so the declared ones keep the
indexes a text-registering producer (Confluent's Java serializer indexes the declared types) puts
in a record's message-index array.
"""
from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

from google.protobuf import descriptor_pb2

from laminar_kafka.errors import LaminarError

__all__ = ["ProtoTextError", "file_descriptor_proto", "parse_proto_text"]

_F = descriptor_pb2.FieldDescriptorProto
SCALARS: dict[str, int] = {
    "double": _F.TYPE_DOUBLE, "float": _F.TYPE_FLOAT, "int64": _F.TYPE_INT64, "uint64": _F.TYPE_UINT64,
    "int32": _F.TYPE_INT32, "fixed64": _F.TYPE_FIXED64, "fixed32": _F.TYPE_FIXED32, "bool": _F.TYPE_BOOL,
    "string": _F.TYPE_STRING, "bytes": _F.TYPE_BYTES, "uint32": _F.TYPE_UINT32, "sfixed32": _F.TYPE_SFIXED32,
    "sfixed64": _F.TYPE_SFIXED64, "sint32": _F.TYPE_SINT32, "sint64": _F.TYPE_SINT64,
}
_LABELS = {"optional": _F.LABEL_OPTIONAL, "required": _F.LABEL_REQUIRED, "repeated": _F.LABEL_REPEATED}
_TOKEN = re.compile(r"""
    (?P<skip>\s+|//[^\n]*|/\*.*?\*/)
  | (?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<num>(?:0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?))
  | (?P<ident>\.?[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<sym>[{}\[\]()<>;=,:+\-/.])
""", re.S | re.X)


class ProtoTextError(LaminarError, ValueError):
    """The text is not ``.proto`` source this parser covers (see the module doc); one line. Not a
    ConnectorError: the registry client turns it into its UnsupportedSchemaError. Still a ValueError
    for callers that parse text without knowing the tree."""


def file_descriptor_proto(name: str, schema_str: str) -> descriptor_pb2.FileDescriptorProto:
    """The file descriptor of a registry Protobuf schema string named ``name`` (an import path, or
    any name for the subject's own schema): the base64 serialized form (Confluent's
    ``format=serialized``) or ``.proto`` text (what Apicurio serves when text was registered).
    Raises :class:`ProtoTextError`."""
    text = schema_str.strip()
    try:
        serialized = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        proto = parse_proto_text(schema_str)
    else:
        proto = descriptor_pb2.FileDescriptorProto()
        try:
            proto.ParseFromString(serialized)
        except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and its backends' variants
            raise ProtoTextError(f"the base64 schema is not a serialized FileDescriptorProto: {exc}") from None
    proto.name = name
    return proto


@dataclass
class _Token:
    kind: str
    text: str
    line: int


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    position, line = 0, 1
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise ProtoTextError(f"line {line}: unexpected character {text[position]!r}")
        kind = match.lastgroup or ""
        if kind != "skip":
            tokens.append(_Token(kind, match.group(), line))
        line += match.group().count("\n")
        position = match.end()
    return tokens


def parse_proto_text(text: str) -> descriptor_pb2.FileDescriptorProto:
    """The ``FileDescriptorProto`` of ``.proto`` source ``text`` (unnamed; type names as written).
    Raises :class:`ProtoTextError` naming the line."""
    return _Parser(_tokens(text)).file()


class _Parser:
    def __init__(self, tokens: list[_Token]) -> None:
        self._tokens = tokens
        self._at = 0
        self._syntax = "proto2"

    # -- tokens -----------------------------------------------------------------------------------

    def _peek(self, ahead: int = 0) -> _Token | None:
        index = self._at + ahead
        return self._tokens[index] if index < len(self._tokens) else None

    def _current(self) -> _Token:
        """The next token, not consumed; raises :class:`ProtoTextError` at the end of the text."""
        token = self._peek()
        if token is None:
            last = self._tokens[-1].line if self._tokens else 1
            raise ProtoTextError(f"line {last}: unexpected end of the schema")
        return token

    def _next(self) -> _Token:
        token = self._current()
        self._at += 1
        return token

    def _expect(self, text: str) -> _Token:
        token = self._next()
        if token.text != text:
            raise ProtoTextError(f"line {token.line}: expected {text!r}, found {token.text!r}")
        return token

    def _accept(self, text: str) -> bool:
        token = self._peek()
        if token is not None and token.text == text and token.kind in ("sym", "ident"):
            self._at += 1
            return True
        return False

    def _ident(self) -> str:
        token = self._next()
        if token.kind != "ident":
            raise ProtoTextError(f"line {token.line}: expected a name, found {token.text!r}")
        return token.text

    def _string(self) -> str:
        token = self._next()
        if token.kind != "str":
            raise ProtoTextError(f"line {token.line}: expected a string, found {token.text!r}")
        value = token.text[1:-1]
        while (following := self._peek()) is not None and following.kind == "str":  # "a" "b" is "ab"
            value += self._next().text[1:-1]
        return value

    def _int(self) -> int:
        negative = self._accept("-")
        token = self._next()
        if token.kind != "num":
            raise ProtoTextError(f"line {token.line}: expected a number, found {token.text!r}")
        try:
            value = int(token.text, 16) if token.text[:2].lower() == "0x" else int(token.text, 8 if token.text[:1] == "0" and len(token.text) > 1 else 10)
        except ValueError:
            raise ProtoTextError(f"line {token.line}: {token.text!r} is not an integer") from None
        return -value if negative else value

    def _skip_statement(self) -> None:
        """Skip to the ``;`` that ends this statement (past any ``{...}`` aggregate value)."""
        depth = 0
        while True:
            token = self._next()
            if token.kind == "sym" and token.text in "{[":
                depth += 1
            elif token.kind == "sym" and token.text in "}]":
                depth -= 1
            elif token.kind == "sym" and token.text == ";" and depth <= 0:
                return

    def _skip_block(self) -> None:
        """Skip a ``name ... { ... }`` block (``service``, ``extend``) up to its closing brace."""
        while not self._accept("{"):
            self._next()
        depth = 1
        while depth:
            token = self._next()
            if token.kind == "sym" and token.text == "{":
                depth += 1
            elif token.kind == "sym" and token.text == "}":
                depth -= 1

    def _skip_field_options(self) -> None:
        """Skip ``[name = value, ...]`` (defaults, ``packed``, ``json_name``...: no effect on decoding)."""
        if not self._accept("["):
            return
        depth = 1
        while depth:
            token = self._next()
            if token.kind == "sym" and token.text in "[{":
                depth += 1
            elif token.kind == "sym" and token.text in "]}":
                depth -= 1

    # -- grammar ----------------------------------------------------------------------------------

    def file(self) -> descriptor_pb2.FileDescriptorProto:
        proto = descriptor_pb2.FileDescriptorProto()
        while (token := self._peek()) is not None:
            word = token.text
            if word == ";":
                self._next()
            elif word == "syntax":
                self._next()
                self._expect("=")
                self._syntax = self._string()
                if self._syntax not in ("proto2", "proto3"):
                    raise ProtoTextError(f"line {token.line}: syntax {self._syntax!r} is not supported")
                self._expect(";")
                if self._syntax == "proto3":
                    proto.syntax = "proto3"
            elif word == "edition":
                raise ProtoTextError(f"line {token.line}: editions (edition = ...) are not supported")
            elif word == "package":
                self._next()
                proto.package = self._ident()
                self._expect(";")
            elif word == "import":
                self._next()
                kind = "public" if self._accept("public") else "weak" if self._accept("weak") else ""
                proto.dependency.append(self._string())
                if kind == "public":
                    proto.public_dependency.append(len(proto.dependency) - 1)
                elif kind == "weak":
                    proto.weak_dependency.append(len(proto.dependency) - 1)
                self._expect(";")
            elif word == "option":
                self._skip_statement()
            elif word == "message":
                self._message(proto.message_type.add())
            elif word == "enum":
                self._enum(proto.enum_type.add())
            elif word in ("service", "extend"):
                self._skip_block()
            else:
                raise ProtoTextError(f"line {token.line}: unexpected {word!r} at the top level")
        return proto

    def _message(self, message: descriptor_pb2.DescriptorProto) -> None:
        self._expect("message")
        message.name = self._ident()
        self._expect("{")
        map_entries: list[descriptor_pb2.DescriptorProto] = []
        synthetic: list[descriptor_pb2.FieldDescriptorProto] = []
        while not self._accept("}"):
            token = self._current()
            word, following = token.text, self._peek(1)
            block = following is not None and following.kind == "ident" and (self._peek(2) or token).text == "{"
            if word == ";":
                self._next()
            elif word == "message" and block:
                self._message(message.nested_type.add())
            elif word == "enum" and block:
                self._enum(message.enum_type.add())
            elif word == "oneof" and block:
                self._oneof(message)
            elif word in ("option", "reserved", "extensions") and (following is None or following.text != "="):
                self._skip_statement()
            elif word == "extend":
                self._skip_block()
            elif word == "map" and following is not None and following.text == "<":
                map_entries.append(self._map_field(message))
            else:
                field = self._field(message, None)
                if field.proto3_optional:
                    synthetic.append(field)
        message.nested_type.extend(map_entries)
        for field in synthetic:  # proto3 optional: each in its own oneof, after the declared oneofs
            field.oneof_index = len(message.oneof_decl)
            message.oneof_decl.add(name=f"_{field.name}")

    def _field(self, message: descriptor_pb2.DescriptorProto, oneof: int | None) -> descriptor_pb2.FieldDescriptorProto:
        first, second, third = self._peek(), self._peek(1), self._peek(2)
        line = first.line if first is not None else 0
        label_word = ""
        if (first is not None and first.text in _LABELS and second is not None and second.kind == "ident"
                and third is not None and third.kind == "ident"):  # "optional T name", not a type named so
            label_word = self._next().text
        type_name = self._ident()
        if type_name == "group":
            raise ProtoTextError(f"line {line}: group fields are not supported")
        field = message.field.add(name=self._ident())
        self._expect("=")
        field.number = self._int()
        self._skip_field_options()
        self._expect(";")
        if type_name in SCALARS:
            field.type = SCALARS[type_name]
        else:
            field.type_name = type_name  # message or enum: the pool resolves it in scope
        field.label = _LABELS.get(label_word, _F.LABEL_OPTIONAL)
        if oneof is not None:
            field.oneof_index = oneof
        elif label_word == "optional" and self._syntax == "proto3":
            field.proto3_optional = True
        return field

    def _map_field(self, message: descriptor_pb2.DescriptorProto) -> descriptor_pb2.DescriptorProto:
        self._expect("map")
        self._expect("<")
        key = self._ident()
        self._expect(",")
        value = self._ident()
        self._expect(">")
        name = self._ident()
        self._expect("=")
        number = self._int()
        self._skip_field_options()
        self._expect(";")
        entry = descriptor_pb2.DescriptorProto(name=_map_entry_name(name))
        entry.options.map_entry = True
        for field_name, field_number, type_name in (("key", 1, key), ("value", 2, value)):
            item = entry.field.add(name=field_name, number=field_number, label=_F.LABEL_OPTIONAL)
            if type_name in SCALARS:
                item.type = SCALARS[type_name]
            else:
                item.type_name = type_name
        message.field.add(name=name, number=number, label=_F.LABEL_REPEATED, type=_F.TYPE_MESSAGE,
                          type_name=entry.name)
        return entry

    def _oneof(self, message: descriptor_pb2.DescriptorProto) -> None:
        self._expect("oneof")
        index = len(message.oneof_decl)
        message.oneof_decl.add(name=self._ident())
        self._expect("{")
        while not self._accept("}"):
            token = self._current()
            if token.text == "option":
                self._skip_statement()
            elif token.text == ";":
                self._next()
            else:
                self._field(message, index)

    def _enum(self, enum: descriptor_pb2.EnumDescriptorProto) -> None:
        self._expect("enum")
        enum.name = self._ident()
        self._expect("{")
        while not self._accept("}"):
            token = self._current()
            following = self._peek(1)
            if token.text == ";":
                self._next()
            elif token.text in ("option", "reserved") and (following is None or following.text != "="):
                self._skip_statement()
            else:
                name = self._ident()
                self._expect("=")
                enum.value.add(name=name, number=self._int())
                self._skip_field_options()
                self._expect(";")


def _map_entry_name(field_name: str) -> str:
    """protoc's name of a map field's entry type: ``my_attrs`` -> ``MyAttrsEntry``."""
    parts, capital = [], True
    for char in field_name:
        if char == "_":
            capital = True
        elif capital:
            parts.append(char.upper() if "a" <= char <= "z" else char)
            capital = False
        else:
            parts.append(char)
    return "".join(parts) + "Entry"
