#!/bin/bash
# The distribution's tool of the same name (the compose file's health check runs it).
KAFKA_HEAP_OPTS="-Xmx128m" exec /opt/kafka/bin/kafka-run-class.sh org.apache.kafka.tools.BrokerApiVersionsCommand "$@"
