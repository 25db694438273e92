"""Decoding records to Arrow: columns per format, timestamps, rejected records, the source schema."""
