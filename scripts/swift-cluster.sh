#!/usr/bin/env bash
# A small OpenStack Swift cluster on loopback, with the S3 API (s3api + tempauth), for appbox's
# tests, demo and benchmarks. Everything lives under DIR: configuration, rings, the disks
# (plain directories), logs and pids. Ports are chosen free at start.
#
#   scripts/swift-cluster.sh start DIR [REPLICAS]   # prints KEY=VALUE lines (endpoint, keys)
#   scripts/swift-cluster.sh stop DIR               # stops the servers started from DIR
#   scripts/swift-cluster.sh stop-proxy DIR         # stops only the S3 front end (the proxy)
#   scripts/swift-cluster.sh start-proxy DIR        # starts it again on the same port
#
# With APPBOX_CLUSTER_OWNER=PID, a watcher stops the cluster when that process ends (a test
# run that crashed or was killed leaves nothing running). With SWIFT_TLS=1 a second proxy
# answers HTTPS (a self-signed certificate, printed as SWIFT_TLS_CA) at APPBOX_S3_TLS_ENDPOINT:
# for clients that sign plain-HTTP uploads as aws-chunked streams, which s3api refuses (restic).
# start prints, once the proxy answers S3 requests:
#   APPBOX_S3_ENDPOINT=http://127.0.0.1:PORT  AWS_ACCESS_KEY_ID=test:tester
#   AWS_SECRET_ACCESS_KEY=testing  SWIFT_PIDS="..."
# and writes the same lines to DIR/env. Needs Debian's swift-proxy, swift-account,
# swift-container and swift-object (`make deps` installs them). Nothing is installed or
# written outside DIR; the servers run as the calling user, in the foreground of their own
# process group, and `stop` (or the death of the caller's test run) ends them.
set -euo pipefail

command=${1:-}
dir=${2:-}
[ -n "$command" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR [REPLICAS]" >&2; exit 64; }

stop() {
  [ -f "$dir/pids" ] || return 0
  local pids
  pids=$(cat "$dir/pids")
  # shellcheck disable=SC2086
  kill $pids 2>/dev/null || true
  for _ in $(seq 1 50); do
    local alive=0
    for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  # shellcheck disable=SC2086
  kill -9 $pids 2>/dev/null || true
  rm -f "$dir/pids"
}

proxy_pid() { tail -n 1 "$dir/pids"; }

case "$command" in
stop)
  stop
  exit 0
  ;;
stop-proxy)
  pid=$(proxy_pid)
  kill "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  exit 0
  ;;
start-proxy)
  setsid swift-proxy-server "$dir/etc/proxy.conf" -v >>"$dir/log/proxy.log" 2>&1 </dev/null &
  pid=$!
  sed -i '$d' "$dir/pids"
  echo $pid >>"$dir/pids"
  port=$(sed -n 's/^bind_port = //p' "$dir/etc/proxy.conf")
  for _ in $(seq 1 300); do
    curl -sf -o /dev/null "http://127.0.0.1:$port/healthcheck" && exit 0
    sleep 0.1
  done
  echo "$0: the proxy in $dir did not start again" >&2
  exit 69
  ;;
start) ;;
*)
  echo "$0: unknown command '$command'" >&2
  exit 64
  ;;
esac

replicas=${3:-1}
python=/usr/bin/python3
for tool in swift-proxy-server swift-account-server swift-container-server swift-object-server \
  swift-ring-builder; do
  command -v "$tool" >/dev/null || {
    echo "$0: $tool is missing (apt-get install swift-proxy swift-account swift-container swift-object)" >&2
    exit 69
  }
done

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
etc=$dir/etc
mkdir -p "$etc" "$dir/log" "$dir/run"
user=$(id -un)

# Free ports: bind port 0 on loopback and read what the kernel chose (released right away;
# the servers bind them a moment later).
read -r -a ports < <($python - "$replicas" <<'EOF'
import socket, sys
n = 3 + 3 * int(sys.argv[1])
socks = []
for _ in range(n):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
)
proxy_port=${ports[0]}
unused_port=${ports[$((1 + 3 * replicas))]}
tls_port=${ports[$((2 + 3 * replicas))]}

cat >"$etc/swift.conf" <<EOF
[swift-hash]
swift_hash_path_suffix = appbox-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
swift_hash_path_prefix = appbox

[storage-policy:0]
name = Policy-0
default = yes
EOF

# One "disk" (a directory) per replica, each with its own account, container and object server.
common() {
  cat <<EOF
[DEFAULT]
devices = $dir/srv
mount_check = false
disable_fallocate = true
bind_ip = 127.0.0.1
bind_port = $1
workers = 0
user = $user
swift_dir = $etc
log_name = $2
log_level = WARNING
log_address = $dir/run/nolog
EOF
}
for ring in account container object; do
  (cd "$etc" && swift-ring-builder "$ring.builder" create 4 "$replicas" 0 >/dev/null)
done
servers=()
for i in $(seq 1 "$replicas"); do
  mkdir -p "$dir/srv/d$i"
  base=$((1 + 3 * (i - 1)))
  account_port=${ports[$base]}
  container_port=${ports[$((base + 1))]}
  object_port=${ports[$((base + 2))]}
  { common "$account_port" "account$i"; printf '\n[pipeline:main]\npipeline = account-server\n\n[app:account-server]\nuse = egg:swift#account\n'; } >"$etc/account$i.conf"
  { common "$container_port" "container$i"; printf '\n[pipeline:main]\npipeline = container-server\n\n[app:container-server]\nuse = egg:swift#container\n'; } >"$etc/container$i.conf"
  { common "$object_port" "object$i"; printf '\n[pipeline:main]\npipeline = object-server\n\n[app:object-server]\nuse = egg:swift#object\n'; } >"$etc/object$i.conf"
  (cd "$etc" && swift-ring-builder account.builder add "r1z$i-127.0.0.1:$account_port/d$i" 100 >/dev/null)
  (cd "$etc" && swift-ring-builder container.builder add "r1z$i-127.0.0.1:$container_port/d$i" 100 >/dev/null)
  (cd "$etc" && swift-ring-builder object.builder add "r1z$i-127.0.0.1:$object_port/d$i" 100 >/dev/null)
  servers+=("swift-account-server $etc/account$i.conf" "swift-container-server $etc/container$i.conf"
    "swift-object-server $etc/object$i.conf")
done
for ring in account container object; do
  (cd "$etc" && swift-ring-builder "$ring.builder" rebalance >/dev/null) || true
done

cat >"$etc/proxy.conf" <<EOF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = $proxy_port
workers = 0
user = $user
swift_dir = $etc
log_name = proxy
log_level = WARNING
log_address = $dir/run/nolog

[pipeline:main]
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats s3api tempauth copy slo dlo proxy-logging proxy-server

[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
allow_account_management = true

[filter:s3api]
use = egg:swift#s3api
location = us-east-1

[filter:tempauth]
use = egg:swift#tempauth
user_test_tester = testing .admin
user_test2_tester2 = testing2 .admin

# tempauth insists on a memcache client but works without a server (every lookup misses): the
# client points at a port nothing listens on, so each miss is an immediate refused connection.
[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:$unused_port

[filter:catch_errors]
use = egg:swift#catch_errors

[filter:gatekeeper]
use = egg:swift#gatekeeper

[filter:healthcheck]
use = egg:swift#healthcheck

[filter:proxy-logging]
use = egg:swift#proxy_logging

[filter:listing_formats]
use = egg:swift#listing_formats

[filter:copy]
use = egg:swift#copy

[filter:slo]
use = egg:swift#slo

[filter:dlo]
use = egg:swift#dlo
EOF
if [ "${SWIFT_TLS:-0}" = 1 ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
    -keyout "$etc/tls.key" -out "$etc/tls.crt" 2>/dev/null
  sed -e "s/^bind_port = .*/bind_port = $tls_port/" -e "/^\[DEFAULT\]/a key_file = $etc/tls.key" \
    -e "/^\[DEFAULT\]/a cert_file = $etc/tls.crt" "$etc/proxy.conf" >"$etc/proxy-tls.conf"
  servers+=("swift-proxy-server $etc/proxy-tls.conf")
fi
# The plain proxy starts last: stop-proxy and start-proxy act on the last server started.
servers+=("swift-proxy-server $etc/proxy.conf")

: >"$dir/pids"
for server in "${servers[@]}"; do
  name=$(basename "${server##* }" .conf)
  # setsid: the servers get their own session, so a terminal's signals do not reach them.
  # shellcheck disable=SC2086
  setsid $server -v >"$dir/log/$name.log" 2>&1 </dev/null &
  echo $! >>"$dir/pids"
done

# Wait for the proxy (and behind it the storage servers) to answer: a signed S3 request that
# lists the account's buckets must succeed (curl's --aws-sigv4 cannot take an access key with a
# colon, which tempauth's are, so the request is signed here).
ready=0
for _ in $(seq 1 300); do
  if $python - "$proxy_port" 2>/dev/null <<'PY'; then
import datetime, hashlib, hmac, sys, urllib.request
port = sys.argv[1]
now = datetime.datetime.now(datetime.timezone.utc)
stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
empty = hashlib.sha256(b"").hexdigest()
host = "127.0.0.1:" + port
canonical = "\n".join(["GET", "/", "", "host:" + host, "x-amz-content-sha256:" + empty,
                       "x-amz-date:" + stamp, "", "host;x-amz-content-sha256;x-amz-date", empty])
scope = day + "/us-east-1/s3/aws4_request"
to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
key = ("AWS4" + "testing").encode()
for part in (day, "us-east-1", "s3", "aws4_request"):
    key = hmac.new(key, part.encode(), hashlib.sha256).digest()
signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
request = urllib.request.Request("http://" + host + "/", headers={
    "x-amz-date": stamp, "x-amz-content-sha256": empty,
    "Authorization": "AWS4-HMAC-SHA256 Credential=test:tester/" + scope
    + ", SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=" + signature})
urllib.request.urlopen(request, timeout=2).read()
PY
    ready=1
    break
  fi
  sleep 0.1
done
if [ $ready = 0 ]; then
  echo "$0: the Swift cluster in $dir did not start; its logs:" >&2
  for log in "$dir"/log/*.log; do echo "== $log" >&2; tail -n 5 "$log" >&2; done
  stop
  exit 69
fi
tr '\n' ' ' <"$dir/pids" | sed 's/ $//' >"$dir/pids.line"
if [ -n "${APPBOX_CLUSTER_OWNER:-}" ]; then
  script=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
  setsid bash -c 'while kill -0 "$1" 2>/dev/null && [ -f "$2/pids" ]; do sleep 1; done; "$3" stop "$2"' \
    watcher "$APPBOX_CLUSTER_OWNER" "$dir" "$script" >/dev/null 2>&1 </dev/null &
fi
cat >"$dir/env" <<EOF
APPBOX_S3_ENDPOINT=http://127.0.0.1:$proxy_port
AWS_ACCESS_KEY_ID=test:tester
AWS_SECRET_ACCESS_KEY=testing
SWIFT_PIDS="$(cat "$dir/pids.line")"
EOF
if [ "${SWIFT_TLS:-0}" = 1 ]; then
  for _ in $(seq 1 300); do
    curl -sf --cacert "$etc/tls.crt" -o /dev/null "https://127.0.0.1:$tls_port/healthcheck" && break
    sleep 0.1
  done
  printf 'APPBOX_S3_TLS_ENDPOINT=https://127.0.0.1:%s\nSWIFT_TLS_CA=%s\n' "$tls_port" "$etc/tls.crt" >>"$dir/env"
fi
cat "$dir/env"
