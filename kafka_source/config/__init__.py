"""The source's typed configuration: properties in, :class:`KafkaSourceConfig` out, with its closed
choices, value parsers, topic selection and schema text."""
