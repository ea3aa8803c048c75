"""Avro: the schemas directory, single-object encoding, generated codecs, schema compatibility."""
