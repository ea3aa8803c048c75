"""The local stack for development and tests: an Apache Kafka broker (or three) from its
official jars, redis-server (or a Redis Cluster), on free ports, stopped afterwards.
Nothing in the runtime imports it (``make lint``'s import contracts)."""
