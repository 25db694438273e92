# Apache ZooKeeper, standalone by default (ZOO_MY_ID and ZOO_SERVERS make an ensemble member).
# ZOO_CFG_EXTRA: more zoo.cfg lines, space separated. Data in /var/lib/zookeeper.
ARG BASE=laminar-jvm-servers:latest
FROM ${BASE}
COPY zookeeper-entrypoint.sh /usr/local/bin/zookeeper-entrypoint.sh
RUN mkdir -p /var/lib/zookeeper /etc/zookeeper && chown -R laminar /var/lib/zookeeper /etc/zookeeper
USER laminar
EXPOSE 2181
ENTRYPOINT ["/usr/local/bin/zookeeper-entrypoint.sh"]
