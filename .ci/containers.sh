#!/usr/bin/env bash
# Installs and configures a container engine for the container test pass (docs/development.md):
# podman from Debian's packages with runc, cgroupfs, a file events logger and default ulimits at or
# below this machine's hard limits; debootstrap (the base image comes from Debian's mirror, no
# registry); Debian's docker-compose 1.29 (without its recommends: no docker.io); and
# `podman system service` as the Docker API on /run/podman/podman.sock.
#
# Idempotent: a second run changes nothing and takes a second. Where a real Docker engine already
# answers (DOCKER_HOST or /var/run/docker.sock), nothing is installed and that engine is used.
# Prints the DOCKER_HOST to use on its last line: `export $(bash .ci/containers.sh | tail -1)`.
set -euo pipefail

SOCKET=/run/podman/podman.sock
CONF=/etc/containers/containers.conf
MARK="# written by laminar-kafka .ci/containers.sh"

say() { echo "containers.sh: $*" >&2; }

engine_answers() {  # $1: unix socket path
  [ -S "$1" ] && python3 - "$1" <<'EOF' >/dev/null 2>&1
import socket, sys
s = socket.socket(socket.AF_UNIX); s.settimeout(3); s.connect(sys.argv[1])
s.sendall(b"GET /_ping HTTP/1.0\r\nHost: d\r\n\r\n"); sys.exit(0 if b" 200 " in s.recv(200) else 1)
EOF
}

# A real Docker engine: use it unchanged.
if [ -z "${LAMINAR_FORCE_PODMAN:-}" ]; then
  if [ -n "${DOCKER_HOST:-}" ] && [[ "$DOCKER_HOST" == unix://* ]] && [ "${DOCKER_HOST#unix://}" != "$SOCKET" ] \
      && engine_answers "${DOCKER_HOST#unix://}"; then
    say "a Docker engine answers at $DOCKER_HOST; using it"
    echo "DOCKER_HOST=$DOCKER_HOST"; exit 0
  fi
  if engine_answers /var/run/docker.sock; then
    say "a Docker engine answers at /var/run/docker.sock; using it"
    echo "DOCKER_HOST=unix:///var/run/docker.sock"; exit 0
  fi
fi

if [ "$(id -u)" != 0 ]; then
  say "must run as root (installs Debian packages and writes $CONF)"; exit 1
fi

# 1. Packages.
packages=(podman runc uidmap slirp4netns fuse-overlayfs iptables netavark aardvark-dns conmon debootstrap)
missing=()
for package in "${packages[@]}" docker-compose; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]} from Debian's packages"
  apt-get update -qq
  # podman's recommends (buildah, catatonit, ...) are wanted; docker-compose's (docker.io) are not.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-compose >/dev/null
fi

# 2. containers.conf: runc (crun fails on hybrid cgroups), cgroupfs and a file events logger (no
# systemd), k8s-file logs (readable through the Docker API), ulimits at or below the hard limits
# (the defaults fail with "setrlimit RLIMIT_NOFILE: Operation not permitted"). podman itself runs
# with a lower nproc hard limit than the shell (32768 here), and runc cannot raise it: the limits
# written are the lower of the shell's and the running podman service's hard limits.
write_conf() {  # $1 nofile, $2 nproc
  local wanted="$MARK
[containers]
default_ulimits = [\"nofile=$1:$1\", \"nproc=$2:$2\"]
log_driver = \"k8s-file\"

[engine]
runtime = \"runc\"
cgroup_manager = \"cgroupfs\"
events_logger = \"file\"
"
  mkdir -p /etc/containers
  if [ -f "$CONF" ] && [ "$(cat "$CONF")" = "$(printf '%s' "$wanted")" ]; then return 1; fi
  if [ -f "$CONF" ] && ! grep -q "^$MARK" "$CONF"; then
    cp "$CONF" "$CONF.before-laminar"
    say "kept the previous $CONF as $CONF.before-laminar"
  fi
  printf '%s' "$wanted" > "$CONF"
  say "wrote $CONF (runc, cgroupfs, file events, nofile $1, nproc $2)"
}
cap() { local v=$1; [ "$v" = unlimited ] && v=1048576; [ "$v" -gt "$2" ] && v=$2; echo "$v"; }
hard_limit() {  # $1 pid, $2 "Max processes" | "Max open files"
  awk -v name="$2" 'index($0, name) == 1 { print $(NF-1) == "unlimited" ? 1048576 : $(NF-1) }' "/proc/$1/limits"
}
nofile=$(cap "$(ulimit -Hn)" 1048576); nproc=$(cap "$(ulimit -Hu)" 1048576)
if [ -f "$CONF" ] && grep -q "^$MARK" "$CONF"; then  # keep a previous run's (already lowered) values
  nofile=$(cap "$(sed -n 's/.*"nofile=\([0-9]*\):.*/\1/p' "$CONF")" "$nofile")
  nproc=$(cap "$(sed -n 's/.*"nproc=\([0-9]*\):.*/\1/p' "$CONF")" "$nproc")
fi
write_conf "$nofile" "$nproc" && restart_service=1

# 3. The Docker-compatible API socket.
stop_service() {
  if [ -f /run/podman/laminar-service.pid ]; then
    kill "$(cat /run/podman/laminar-service.pid)" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$(cat /run/podman/laminar-service.pid)" 2>/dev/null || break; sleep 0.1; done
    rm -f /run/podman/laminar-service.pid
  fi
}
start_service() {
  mkdir -p /run/podman /var/log/laminar
  rm -f "$SOCKET"
  # from /: the service outlives this script, and conmon fails in a deleted working directory
  pushd / >/dev/null
  setsid nohup podman system service --time=0 "unix://$SOCKET" >>/var/log/laminar/podman-service.log 2>&1 < /dev/null &
  echo $! > /run/podman/laminar-service.pid
  popd >/dev/null
  for _ in $(seq 1 100); do engine_answers "$SOCKET" && break; sleep 0.1; done
  engine_answers "$SOCKET" || { say "podman system service did not answer on $SOCKET; see /var/log/laminar/podman-service.log"; exit 1; }
  say "podman system service answers on $SOCKET"
}
[ -n "${restart_service:-}" ] && stop_service
engine_answers "$SOCKET" || start_service
if [ -f /run/podman/laminar-service.pid ]; then
  pid=$(cat /run/podman/laminar-service.pid)
  service_nofile=$(hard_limit "$pid" "Max open files"); service_nproc=$(hard_limit "$pid" "Max processes")
  if [ -n "$service_nproc" ] && [ -n "$service_nofile" ] \
      && write_conf "$(cap "$nofile" "$service_nofile")" "$(cap "$nproc" "$service_nproc")"; then
    stop_service; start_service
  fi
fi

# 4. The engine reports its runtime (whether a container runs is checked by `python -m laminar_kafka.devstack.containers check`).
if ! podman info --format '{{.Host.OCIRuntime.Name}} {{.Host.CgroupManager}}' >/dev/null 2>&1; then
  say "podman info fails: $(podman info 2>&1 | tail -1)"; exit 1
fi
echo "DOCKER_HOST=unix://$SOCKET"
