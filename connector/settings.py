"""One declaration per setting, in the manner of Kafka's ``ConfigDef``: name, type, default, unit,
choices, bounds, doc, and the layer that reads it.

A :class:`Setting` parses a value given as text (a source property, an environment variable, a flag)
or as a TOML value, checks it against its declaration and writes it back as text. The tables of
declarations live with their readers (the Kafka source's in ``kafka_source.config.definitions``, the
node's in ``cluster.settings_def``); the CLI flags, the property keys, the environment names and the
reference tables of ``docs/settings.md`` are generated from them. Pure: no I/O.
"""
from __future__ import annotations

import enum
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from laminar_kafka.errors import ConfigurationError

__all__ = ["FALSE_WORDS", "TRUE_WORDS", "Layer", "Setting", "by_name", "renamed_keys"]

FALSE_WORDS = frozenset({"false", "0", "no", "off"})
TRUE_WORDS = frozenset({"true", "1", "yes", "on"})


class Layer(enum.Enum):
    """Who reads a setting: the source's properties, the node's settings, or both (the node passes
    it through to the source under the same name)."""

    SOURCE = "source"
    NODE = "node"
    BOTH = "both"


@dataclass(frozen=True)
class Setting:
    """One setting, declared once.

    ``type`` is ``str``, ``int``, ``float``, ``bool`` or an :class:`enum.Enum` whose values are the
    choices. ``default`` is the typed default (``None``: none, the setting is optional or
    ``required``). ``minimum`` and ``maximum`` bound a number (inclusive). ``check``, when given,
    receives the parsed value and returns a problem (the text after ``<name>=<value>: ``) or
    ``None``. ``shown_default`` replaces ``str(default)`` in help and docs (``32 MiB``,
    ``laminar-<pipeline>``). ``notes`` is documentation beyond the one-line ``doc`` (docs only).
    ``old_names`` are spellings of earlier releases, still accepted with a :class:`DeprecationWarning`.
    """

    name: str
    type: type
    doc: str
    default: Any = None
    required: bool = False
    unit: str = ""
    minimum: float | None = None
    maximum: float | None = None
    check: Callable[[Any], str | None] | None = None
    layer: Layer = Layer.SOURCE
    shown_default: str = ""
    notes: str = ""
    old_names: tuple[str, ...] = ()

    @property
    def choices(self) -> tuple[str, ...]:
        """The closed set of values (from the enum), empty for an open one."""
        if isinstance(self.type, type) and issubclass(self.type, enum.Enum):
            return tuple(str(member.value) for member in self.type)
        return ()

    @property
    def default_text(self) -> str:
        """The default as help and docs show it ("" when there is none)."""
        if self.shown_default:
            return self.shown_default
        if self.required:
            return "required"
        return "" if self.default is None else self.text(self.default)

    def help(self) -> str:
        """The one-line help of the setting's flag: its doc and default."""
        default = self.default_text
        return f"{self.doc} (default {default})" if default and not self.required else self.doc

    def parse(self, value: Any) -> Any:
        """``value`` (text, or a TOML value) as this setting's type, checked; raises
        :class:`ConfigurationError` naming the setting."""
        return self.validate(self._convert(value))

    def validate(self, value: Any) -> Any:
        """``value``, already of this setting's type, checked against the bounds and ``check``."""
        if self.minimum is not None and value < self.minimum:
            raise ConfigurationError(f"{self.name} must be >= {_number(self.minimum)}, got {value!r}")
        if self.maximum is not None and value > self.maximum:
            raise ConfigurationError(f"{self.name} must be <= {_number(self.maximum)}, got {value!r}")
        problem = self.check(value) if self.check is not None and value is not None else None
        if problem:
            raise ConfigurationError(f"{self.name}={value!r}: {problem}")
        return value

    def text(self, value: Any) -> str:
        """``value`` written back as a property's text (``parse(text(v)) == v``)."""
        if isinstance(value, enum.Enum):
            return str(value.value)
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, float):
            return repr(value)
        return str(value)

    def _convert(self, value: Any) -> Any:
        kind = self.type
        if isinstance(value, str):
            value = value.strip()
        if kind is bool:
            if isinstance(value, bool):
                return value
            word = str(value).lower()
            if word in TRUE_WORDS or word in FALSE_WORDS:
                return word in TRUE_WORDS
            raise ConfigurationError(f"{self.name}={value!r} is not a boolean (true or false)")
        if kind is int:
            if isinstance(value, bool) or isinstance(value, float):
                raise ConfigurationError(f"{self.name}={value!r} is not an integer")
            try:
                return int(value)
            except ValueError:
                raise ConfigurationError(f"{self.name}={value!r} is not an integer") from None
        if kind is float:
            if isinstance(value, bool):
                raise ConfigurationError(f"{self.name}={value!r} is not a number")
            try:
                return float(value)
            except ValueError:
                raise ConfigurationError(f"{self.name}={value!r} is not a number") from None
        if issubclass(kind, enum.Enum):
            try:
                return kind(str(value).lower())
            except ValueError:
                raise ConfigurationError(
                    f"{self.name}={value!r}: expected one of {', '.join(self.choices)}") from None
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            raise ConfigurationError(f"{self.name}={value!r} is not a string")
        return str(value)


def _number(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def by_name(settings: Iterable[Setting]) -> Mapping[str, Setting]:
    """The declarations keyed by name; a name declared twice raises :class:`ValueError`."""
    table: dict[str, Setting] = {}
    for setting in settings:
        if setting.name in table:
            raise ValueError(f"setting {setting.name!r} declared twice")
        table[setting.name] = setting
    return table


def renamed_keys(properties: Mapping[str, str], settings: Iterable[Setting]) -> dict[str, str]:
    """``properties`` with every old spelling of a declared setting replaced by its name, one
    :class:`DeprecationWarning` per old key naming the new one; an old and a new spelling of one
    setting together raise :class:`ConfigurationError`."""
    old = {alias: setting.name for setting in settings for alias in setting.old_names}
    renamed: dict[str, str] = {}
    for key, value in properties.items():
        name = old.get(key)
        if name is None:
            renamed[key] = value
            continue
        if name in properties:
            raise ConfigurationError(f"{key!r} and {name!r} are the same setting: give only {name!r}")
        warnings.warn(f"property {key!r} is deprecated: use {name!r}", DeprecationWarning, stacklevel=4)
        renamed[name] = value
    return renamed
