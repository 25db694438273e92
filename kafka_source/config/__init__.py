"""The source's typed configuration: its settings declared once (``definitions``), properties parsed
by concern (``parsing``) into :class:`KafkaSourceConfig` (``source_config``), with its closed choices,
value parsers, topic selection and schema text."""
