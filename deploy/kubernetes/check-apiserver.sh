#!/usr/bin/env bash
# Installs the chart into a real Kubernetes API server on loopback, and checks what the server made
# of it (opt-in, not part of CI: `make k8s-apiserver-check`).
#
#   1. builds etcd, kube-apiserver and kubectl from the Go module proxy, once per version, into
#      $LAMINAR_CACHE_DIR/tools/kubernetes-<version>-etcd-<version> (a cold build: about 8.5 minutes
#      of both cores);
#   2. starts etcd and kube-apiserver on 127.0.0.1 (a service-account key pair from openssl, a token
#      auth file, RBAC), with a throwaway data directory;
#   3. helm install --dry-run=server, then helm install of deploy/helm/laminar-kafka with every Secret
#      in use; checks the StatefulSet, Service, PDB, ConfigMap and Secrets as the server defaulted them;
#      helm upgrade to another replica count; helm uninstall; the same install with values-dev.yaml;
#      then kubectl apply -k of deploy/kubernetes and of its overlay example, and delete -k;
#   4. stops both servers and removes the data directory, whatever happened.
#
# No kubelet, container runtime, controller manager or scheduler runs: objects are stored and
# defaulted, no pod is created or run. Prints one line per step with its duration; exit 0 when every
# check passed. helm: $LAMINAR_HELM, else helm on PATH, else .ci/go-tools.sh builds it.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.36.3}
STAGING_VERSION=${STAGING_VERSION:-v0.36.3}   # the k8s.io/<staging> module release of K8S_VERSION
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
chart="$repo/deploy/helm/laminar-kafka"
bin="${LAMINAR_CACHE_DIR:-$HOME/.cache/laminar-kafka}/tools/kubernetes-$K8S_VERSION-etcd-$ETCD_VERSION"

say() { echo "check-apiserver: $*"; }
fail() { echo "check-apiserver: FAILED: $*" >&2; exit 1; }
started=$(date +%s.%N)
step_start=$started
step() {  # ends the running step: prints its name and duration
  local now; now=$(date +%s.%N)
  printf 'check-apiserver: %-62s %6.1f s\n' "$1" "$(echo "$now - $step_start" | bc)"
  step_start=$now
}

if ! command -v go >/dev/null 2>&1; then
  for candidate in /usr/local/go/bin /usr/lib/go/bin; do
    [ -x "$candidate/go" ] && PATH="$candidate:$PATH"
  done
fi
command -v go >/dev/null 2>&1 || fail "Go is not installed (1.25 or later: https://go.dev/doc/install)"
for tool in openssl curl jq bc; do
  command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed"
done

# --- 1. the binaries -------------------------------------------------------------------------------
build_binaries() {
  # k8s.io/kubernetes points each staging module (k8s.io/api, k8s.io/apiserver...) at
  # ./staging/src/k8s.io/<name>, which `go install` refuses: a wrapper module replaces each with its
  # published release instead.
  local mod="$bin.build"
  rm -rf "$mod" && mkdir -p "$mod" "$bin"
  (
    cd "$mod"
    export GOFLAGS=-mod=mod CGO_ENABLED=0
    go mod init laminar.local/kubernetes-tools >/dev/null 2>&1
    local gomod
    gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | jq -r .GoMod)
    local replaced=0
    for name in $(sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/.*#\1#p' "$gomod"); do
      go mod edit -replace "$name=$name@$STAGING_VERSION"
      replaced=$((replaced + 1))
    done
    [ "$replaced" -gt 0 ] || fail "no staging module found in k8s.io/kubernetes@$K8S_VERSION's go.mod"
    say "building etcd $ETCD_VERSION, kube-apiserver and kubectl $K8S_VERSION ($replaced staging modules replaced; cached in $bin)"
    go get "k8s.io/kubernetes@$K8S_VERSION" "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >get.log 2>&1 \
      || { tail -20 get.log >&2; fail "go get k8s.io/kubernetes@$K8S_VERSION go.etcd.io/etcd/server/v3@$ETCD_VERSION"; }
    local version="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
    go build -o "$bin/etcd" go.etcd.io/etcd/server/v3
    go build -ldflags "$version" -o "$bin/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
    go build -ldflags "$version" -o "$bin/kubectl" k8s.io/kubernetes/cmd/kubectl
  )
  rm -rf "$mod"
}
if [ ! -x "$bin/etcd" ] || [ ! -x "$bin/kube-apiserver" ] || [ ! -x "$bin/kubectl" ]; then
  build_binaries
fi
helm=${LAMINAR_HELM:-$(command -v helm || true)}
if [ -z "$helm" ]; then
  helm=$(bash "$repo/.ci/go-tools.sh" | sed -n 's/^LAMINAR_HELM=//p')
fi
step "binaries ready (etcd, kube-apiserver, kubectl $K8S_VERSION; helm)"

# --- 2. etcd and kube-apiserver on loopback -------------------------------------------------------
work=$(mktemp -d /tmp/laminar-apiserver.XXXXXX)
pids=()
stop() {  # SIGTERM, then SIGKILL after 15 s (kube-apiserver can wait on a gone etcd for long)
  local pid=$1 i
  kill "$pid" 2>/dev/null || return 0
  for i in $(seq 150); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {  # the API server first, then etcd
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do stop "${pids[$i]}"; done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
etcd_client=$(free_port); etcd_peer=$(free_port); api_port=$(free_port)

openssl genrsa -out "$work/sa.key" 2048 2>/dev/null
openssl rsa -in "$work/sa.key" -pubout -out "$work/sa.pub" 2>/dev/null
token=$(openssl rand -hex 24)
echo "$token,laminar-admin,laminar-admin,system:masters" > "$work/tokens.csv"

"$bin/etcd" --name check --data-dir "$work/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_client" --advertise-client-urls "http://127.0.0.1:$etcd_client" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
  --initial-cluster "check=http://127.0.0.1:$etcd_peer" >"$work/etcd.log" 2>&1 &
pids+=($!)
"$bin/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_client" \
  --bind-address 127.0.0.1 --secure-port "$api_port" --cert-dir "$work/certs" \
  --token-auth-file "$work/tokens.csv" --authorization-mode RBAC \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$work/sa.pub" --service-account-signing-key-file "$work/sa.key" \
  --service-cluster-ip-range 10.96.0.0/16 >"$work/apiserver.log" 2>&1 &
pids+=($!)

cat > "$work/kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
  - name: check
    cluster: {server: "https://127.0.0.1:$api_port", insecure-skip-tls-verify: true}
users:
  - name: admin
    user: {token: "$token"}
contexts:
  - name: check
    context: {cluster: check, user: admin}
current-context: check
KUBECONFIG
export KUBECONFIG="$work/kubeconfig"
kubectl() { "$bin/kubectl" "$@"; }

deadline=$(( $(date +%s) + 120 ))
until [ "$(curl -sk -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "https://127.0.0.1:$api_port/readyz")" = 200 ]; do
  if [ "$(date +%s)" -gt "$deadline" ]; then
    tail -20 "$work/apiserver.log" >&2
    fail "kube-apiserver not ready in 120 s"
  fi
  sleep 0.5
done
step "etcd and kube-apiserver up, /readyz ok ($(kubectl version -o json | jq -r .serverVersion.gitVersion))"

# --- 3. the chart ------------------------------------------------------------------------------------
ns=laminar
kubectl create namespace "$ns" >/dev/null
# every Secret in use, Iceberg through a REST catalog, one extra setting
values=(--set tableFormat=iceberg --set catalog.uri=http://catalog:8181 --set catalog.credential=client:secret
        --set catalog.token=t0ken --set objectStore.endpoint=http://seaweedfs:8333 --set objectStore.region=us-east-1
        --set objectStore.accessKeyId=AKIDEXAMPLE --set objectStore.secretAccessKey=s3cr3t
        --set zookeeper.auth=lake:zkpass --set kafka.properties.security\\.protocol=SASL_SSL
        --set kafka.secretProperties.sasl\\.password=kpass --set kafka.secretProperties.sasl\\.username=lake
        --set settings.checkpoint-interval-ms=2000)
"$helm" install laminar-kafka "$chart" -n "$ns" "${values[@]}" --dry-run=server >"$work/dry-run.txt"
grep -q '^kind: StatefulSet' "$work/dry-run.txt" || fail "helm install --dry-run=server rendered no StatefulSet"
kubectl get statefulset -n "$ns" -o name | grep -q . && fail "--dry-run=server created a StatefulSet"
step "helm install --dry-run=server (validated by the server, nothing stored)"

"$helm" install laminar-kafka "$chart" -n "$ns" "${values[@]}" >/dev/null
step "helm install"

get() { kubectl get -n "$ns" "$@" -o json; }
check() {  # $1 description, $2 jq expression that must be true on $3 (JSON); the object is kept on failure
  if ! echo "$3" | jq -e "$2" >/dev/null; then
    echo "$3" > /tmp/check-apiserver-failed.json
    fail "$1: $2 is $(echo "$3" | jq -c "$2") (the object: /tmp/check-apiserver-failed.json)"
  fi
}
sts=$(get statefulset laminar-kafka)
check "StatefulSet replicas 3, Parallel" '.spec.replicas == 3 and .spec.podManagementPolicy == "Parallel"' "$sts"
# what the server filled in (the chart sets none of these)
check "defaulted: revisionHistoryLimit" '.spec.revisionHistoryLimit == 10' "$sts"
check "defaulted: PVC retention policy" '.spec.persistentVolumeClaimRetentionPolicy.whenScaled == "Retain"' "$sts"
check "defaulted: restartPolicy, dnsPolicy, schedulerName" '.spec.template.spec | .restartPolicy == "Always"
   and .dnsPolicy == "ClusterFirst" and .schedulerName == "default-scheduler"' "$sts"
check "defaulted: container fields" '.spec.template.spec.containers[0] | .terminationMessagePath == "/dev/termination-log"
   and .terminationMessagePolicy == "File"' "$sts"
check "defaulted: emptyDir medium" '[.spec.template.spec.volumes[] | select(.emptyDir)] | length == 2' "$sts"
check "the node's command" '.spec.template.spec.containers[0].args | index("--node-id") as $i | .[$i + 1] == "auto"' "$sts"
check "probes defaulted" '.spec.template.spec.containers[0] | .livenessProbe.httpGet.scheme == "HTTP"
   and .livenessProbe.httpGet.path == "/healthz" and .readinessProbe.httpGet.path == "/readyz"
   and .readinessProbe.successThreshold == 1 and .startupProbe.httpGet.port == "metrics"' "$sts"
check "grace period" '.spec.template.spec.terminationGracePeriodSeconds == 130' "$sts"
check "the four Secrets in envFrom" '[.spec.template.spec.containers[0].envFrom[].secretRef.name] | sort
   == ["laminar-kafka-catalog", "laminar-kafka-kafka", "laminar-kafka-object-store", "laminar-kafka-zookeeper"]' "$sts"
svc=$(get service laminar-kafka)
check "headless Service" '.spec.clusterIP == "None" and .spec.ports[0].name == "metrics"
   and .spec.type == "ClusterIP" and .spec.sessionAffinity == "None"' "$svc"
pdb=$(get poddisruptionbudget laminar-kafka)
check "PDB" '.spec.maxUnavailable == 1 and .spec.selector.matchLabels["app.kubernetes.io/name"] == "laminar-kafka"' "$pdb"
cm=$(get configmap laminar-kafka)
check "ConfigMap holds laminar.toml, no secret" '.data["laminar.toml"] | (contains("catalog-uri")
   and (contains("kpass") or contains("zkpass") or contains("s3cr3t") or contains("t0ken") or contains("client:secret") | not))' "$cm"
secrets=$(kubectl get secrets -n "$ns" -l app.kubernetes.io/instance=laminar-kafka -o json)
check "Secrets stored with their keys" '[.items[] | {(.metadata.name): (.data | keys)}] | add ==
   {"laminar-kafka-catalog": ["LAMINAR_ICEBERG__CREDENTIAL", "LAMINAR_ICEBERG__TOKEN"],
    "laminar-kafka-kafka": ["LAMINAR_KAFKA__SASL_PASSWORD", "LAMINAR_KAFKA__SASL_USERNAME"],
    "laminar-kafka-object-store": ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"],
    "laminar-kafka-zookeeper": ["LAMINAR_ZK_AUTH"]}' "$secrets"
check "Secret value" '.items[] | select(.metadata.name == "laminar-kafka-kafka") | .data.LAMINAR_KAFKA__SASL_PASSWORD | @base64d == "kpass"' "$secrets"
step "StatefulSet, Service, PDB, ConfigMap, 4 Secrets stored and defaulted"

"$helm" upgrade laminar-kafka "$chart" -n "$ns" --reuse-values --set replicaCount=5 >/dev/null
check "replicas after upgrade" '.spec.replicas == 5 and .metadata.generation == 2' "$(get statefulset laminar-kafka)"
[ "$("$helm" history laminar-kafka -n "$ns" -o json | jq length)" = 2 ] || fail "helm history has no second revision"
step "helm upgrade --set replicaCount=5 (generation 2)"

"$helm" uninstall laminar-kafka -n "$ns" >/dev/null
left=$(kubectl get statefulset,service,poddisruptionbudget,configmap,secret,serviceaccount -n "$ns" \
  -l app.kubernetes.io/instance=laminar-kafka -o name)
[ -z "$left" ] || fail "left after helm uninstall: $left"
step "helm uninstall (nothing left)"

# values-dev.yaml: the dev servers beside the nodes
kubectl create namespace laminar-dev >/dev/null
"$helm" install try "$chart" -n laminar-dev -f "$chart/values-dev.yaml" --dry-run=server >/dev/null
"$helm" install try "$chart" -n laminar-dev -f "$chart/values-dev.yaml" >/dev/null
check "values-dev: four StatefulSets" '[.items[].metadata.name] | sort == ["try-laminar-kafka", "try-laminar-kafka-dev-kafka",
   "try-laminar-kafka-dev-s3", "try-laminar-kafka-dev-zookeeper"]' "$(kubectl get statefulsets -n laminar-dev -o json)"
check "values-dev: the topic init" '.spec.template.spec.initContainers[0].name == "topic-init-0"' \
  "$(kubectl get statefulset try-laminar-kafka -n laminar-dev -o json)"
"$helm" uninstall try -n laminar-dev >/dev/null
step "helm install -f values-dev.yaml (dry-run=server, real), uninstall"

kubectl create namespace laminar-manifests >/dev/null
kubectl apply -k "$here" -n laminar-manifests --dry-run=server >/dev/null
kubectl apply -k "$here" -n laminar-manifests >/dev/null
check "rendered manifests applied" '.spec.replicas == 3 and .metadata.namespace == "laminar-manifests"' \
  "$(kubectl get statefulset laminar-kafka -n laminar-manifests -o json)"
kubectl delete -k "$here" -n laminar-manifests >/dev/null
step "kubectl apply -k deploy/kubernetes (dry-run=server, real), delete -k"

# docs/kubernetes.md's overlay: its image, ConfigMap and Secret reach the StatefulSet
kubectl apply -k "$repo/deploy/kubernetes-overlay-example" -n laminar-manifests >/dev/null
sts=$(kubectl get statefulset laminar-kafka -n laminar-manifests -o json)
check "overlay image" '.spec.template.spec.containers[0].image == "registry.example.com/lake/laminar-kafka:0.1.0"' "$sts"
check "overlay envFrom" '.spec.template.spec.containers[0].envFrom[0].secretRef.name | startswith("laminar-kafka-credentials-")' "$sts"
check "overlay laminar.toml" '.data["laminar.toml"] | contains("table-format = \"iceberg\"")' \
  "$(kubectl get configmap laminar-kafka -n laminar-manifests -o json)"
kubectl delete -k "$repo/deploy/kubernetes-overlay-example" -n laminar-manifests >/dev/null
step "kubectl apply -k deploy/kubernetes-overlay-example (image, ConfigMap, Secret), delete -k"

printf 'check-apiserver: every check passed in %.1f s\n' "$(echo "$(date +%s.%N) - $started" | bc)"
