#!/bin/bash
# Writes /etc/zookeeper/zoo.cfg (tickTime 500 ms, so sessions of 1 s to 60 s can be negotiated, as
# the local launcher does) and execs the server.
set -euo pipefail
CONFIG=/etc/zookeeper/zoo.cfg
DATA=/var/lib/zookeeper
cat > "$CONFIG" <<CFG
tickTime=${ZOO_TICK_TIME:-500}
initLimit=20
syncLimit=10
dataDir=$DATA
clientPort=2181
maxClientCnxns=0
minSessionTimeout=${ZOO_MIN_SESSION_TIMEOUT:-1000}
maxSessionTimeout=${ZOO_MAX_SESSION_TIMEOUT:-60000}
admin.enableServer=false
4lw.commands.whitelist=*
autopurge.purgeInterval=1
CFG
if [ -n "${ZOO_MY_ID:-}" ]; then
  echo "$ZOO_MY_ID" > "$DATA/myid"
  for server in ${ZOO_SERVERS:-}; do echo "$server" >> "$CONFIG"; done   # server.N=host:peer:election
fi
for line in ${ZOO_CFG_EXTRA:-}; do echo "$line" >> "$CONFIG"; done
# shellcheck disable=SC2086 - the option variable is a word list
exec java ${ZOO_HEAP_OPTS:--Xmx256m -Xms64m} -XX:+UseG1GC -Djava.awt.headless=true -Djava.net.preferIPv4Stack=true \
  -Dzookeeper.admin.enableServer=false -Dlog4j2.configurationFile=/opt/laminar/log4j2.properties \
  -cp '/opt/laminar/lib/*' org.apache.zookeeper.server.quorum.QuorumPeerMain "$CONFIG"
