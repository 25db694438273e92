"""The record schema of ``format=json`` without ``json-schema``: inferred once, pinned for the pipeline.

Every node and every restart of a pipeline must write the same columns, so a schema inferred from a
sample cannot be inferred again by each node (two samples can differ). The first node to start infers
it from up to :data:`~laminar_kafka.kafka_source.decode.schema.SAMPLE_RECORDS` records at the topics' start and pins its
text form (``name:type,...``, :mod:`laminar_kafka.kafka_source.config.type_text`) create-once in the coordinator
(``Coordinator.pin_setting("json.schema", ...)``); every later start reads the pinned value and never
samples again. When the topics hold no record yet, the node waits for one (up to ``wait_s``) and
then stops with a one-line error that names the ``json-schema`` setting.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pyarrow as pa

from laminar_kafka.cluster.errors import RuntimeFailure
from laminar_kafka.coordinator.base import Coordinator
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.config.type_text import parse_schema_text, schema_text

logger = logging.getLogger(__name__)

__all__ = ["JSON_SCHEMA_SETTING", "JsonSchemaPin"]

#: the coordinator setting holding the pinned schema
JSON_SCHEMA_SETTING = "json.schema"


class JsonSchemaPin:
    """Pins (or reads the pinned) JSON schema when called with the started coordinator; then
    :attr:`text` holds it for every source generation. ``discover`` samples the topics (blocking;
    raises :class:`ConfigurationError` when they are empty)."""

    def __init__(
        self,
        discover: Callable[[], pa.Schema],
        wait_s: float = 60.0,
        retry_s: float = 2.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._discover = discover
        self._wait_s = wait_s
        self._retry_s = retry_s
        self._sleep = sleep
        self._clock = clock
        self.text: str = ""

    def __call__(self, coordinator: Coordinator) -> None:
        """Blocking: read the pinned schema, or infer one and pin it (another node may win: its
        schema is used). Raises :class:`RuntimeFailure` when no schema can be had."""
        pinned = coordinator.pin_setting(JSON_SCHEMA_SETTING, None)
        if pinned is None:
            proposed = self._infer()
            pinned = coordinator.pin_setting(JSON_SCHEMA_SETTING, proposed)
            assert pinned is not None
            logger.info("JSON schema inferred from a sample and pinned%s: %s",
                        "" if pinned == proposed else " (by another node)", pinned)
        else:
            logger.info("JSON schema pinned for the pipeline: %s", pinned)
        try:
            parse_schema_text(pinned)
        except ConfigurationError as exc:
            raise RuntimeFailure(f"the pipeline's pinned JSON schema does not parse: {exc}", cause=exc) from exc
        self.text = pinned

    def _infer(self) -> str:
        deadline = self._clock() + self._wait_s
        announced = False
        while True:
            try:
                schema = self._discover()
                break
            except ConfigurationError as exc:
                if "empty" not in str(exc) or self._clock() >= deadline:
                    raise RuntimeFailure(
                        f"format=json without json-schema: cannot infer a schema ({exc}); "
                        "set json-schema name:type,...", cause=exc,
                    ) from exc
                if not announced:
                    logger.info("format=json: waiting for a first record to infer the schema from")
                    announced = True
                self._sleep(self._retry_s)
        try:
            return schema_text(schema)
        except ConfigurationError as exc:
            raise RuntimeFailure(f"the inferred JSON schema cannot be pinned ({exc}); set json-schema", cause=exc) from exc
