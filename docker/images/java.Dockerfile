# Java 17 runtime for the Kafka and ZooKeeper images. BASE: any Debian bookworm image; built here from
# the debootstrap base (`python -m laminar_kafka.devstack.containers build`), elsewhere `debian:bookworm-slim` works.
ARG BASE=debian:bookworm-slim
FROM ${BASE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
