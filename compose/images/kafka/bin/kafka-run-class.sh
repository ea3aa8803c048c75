#!/bin/bash
# Runs a class of the Kafka jars, as the distribution's script of the same name does.
exec java ${KAFKA_HEAP_OPTS:--Xmx256m} ${KAFKA_JVM_PERFORMANCE_OPTS:--XX:+UseG1GC -XX:MaxGCPauseMillis=20} \
    -Djava.awt.headless=true -Dlog4j2.configurationFile=/opt/kafka/config/tools-log4j2.properties \
    ${KAFKA_OPTS} -cp '/opt/kafka/libs/*' "$@"
