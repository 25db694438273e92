#!/bin/bash
# Writes /etc/kafka/server.properties from defaults and KAFKA_* variables, formats the KRaft storage
# once (CLUSTER_ID, or one generated and kept in the data directory) and execs the broker.
# Listeners: PLAINTEXT (9092) for clients, advertised as whatever address they reach it at (a
# published host port: KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://127.0.0.1:<port>,BROKER://localhost:9094);
# BROKER (9094) for the broker's requests to itself (transaction verification sends AddPartitionsToTxn
# to the coordinator, here itself, at its inter-broker address, which must resolve inside the container).
set -euo pipefail
CONFIG=/etc/kafka/server.properties
DATA=/var/lib/kafka/data

declare -A props=(
  [process.roles]=broker,controller
  [node.id]=1
  [controller.quorum.voters]=1@localhost:9093
  [listeners]=PLAINTEXT://:9092,BROKER://:9094,CONTROLLER://:9093
  [advertised.listeners]=PLAINTEXT://localhost:9092,BROKER://localhost:9094
  [controller.listener.names]=CONTROLLER
  [inter.broker.listener.name]=BROKER
  [listener.security.protocol.map]=PLAINTEXT:PLAINTEXT,BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT
  [log.dirs]=$DATA
  [num.partitions]=1
  [default.replication.factor]=1
  [min.insync.replicas]=1
  [offsets.topic.replication.factor]=1
  [offsets.topic.num.partitions]=10
  [transaction.state.log.replication.factor]=1
  [transaction.state.log.min.isr]=1
  [transaction.state.log.num.partitions]=4
  [share.coordinator.state.topic.replication.factor]=1
  [share.coordinator.state.topic.min.isr]=1
  [group.initial.rebalance.delay.ms]=0
  [auto.create.topics.enable]=false
  [num.network.threads]=2
  [num.io.threads]=4
  [broker.heartbeat.interval.ms]=500
  [broker.session.timeout.ms]=3000
)
for name in $(compgen -e); do
  case "$name" in
    KAFKA_HEAP_OPTS|KAFKA_OPTS|KAFKA_JVM_PERFORMANCE_OPTS) continue ;;
    KAFKA_*) ;;
    *) continue ;;
  esac
  key=${name#KAFKA_}; key=${key,,}
  key=${key//___/-}; key=${key//__/@}; key=${key//_/.}; key=${key//@/_}
  props[$key]=${!name}
done
# An empty value removes a default (e.g. KAFKA_CONTROLLER_QUORUM_VOTERS= with controller.quorum.bootstrap.servers).
: > "$CONFIG"
for key in $(printf '%s\n' "${!props[@]}" | sort); do
  [ -n "${props[$key]}" ] && printf '%s=%s\n' "$key" "${props[$key]}" >> "$CONFIG"
done

if [ -z "${CLUSTER_ID:-}" ]; then
  if [ -f "$DATA/.cluster-id" ]; then
    CLUSTER_ID=$(cat "$DATA/.cluster-id")
  else
    CLUSTER_ID=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=' | sed 's/^-/A/')
  fi
fi
mkdir -p "$DATA"
echo "$CLUSTER_ID" > "$DATA/.cluster-id"

CLASSPATH='/opt/laminar/lib/*'
JAVA_COMMON=(-Djava.awt.headless=true -Djava.net.preferIPv4Stack=true
             -Dlog4j2.configurationFile=/opt/laminar/log4j2.properties)
java -Xmx256m "${JAVA_COMMON[@]}" -cp "$CLASSPATH" kafka.tools.StorageTool format \
  --cluster-id="$CLUSTER_ID" --config "$CONFIG" --ignore-formatted >/dev/null
# shellcheck disable=SC2086 - the option variables are word lists
exec java ${KAFKA_HEAP_OPTS:--Xmx512m -Xms128m} ${KAFKA_JVM_PERFORMANCE_OPTS:--XX:+UseG1GC -XX:MaxGCPauseMillis=20} \
  ${KAFKA_OPTS:-} "${JAVA_COMMON[@]}" -cp "$CLASSPATH" kafka.Kafka "$CONFIG"
