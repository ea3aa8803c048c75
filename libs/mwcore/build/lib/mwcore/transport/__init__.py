"""Kafka: topic names and creation, client settings, the schemas and watermark topics, archive reads."""
