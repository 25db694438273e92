"""Schema-registry records: the client and wire format, Arrow types of its schemas, decoding."""
