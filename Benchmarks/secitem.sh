#!/usr/bin/env bash
# make bench (and make bench-secitem): the keychain from inside the sandbox.
#
# A confined C client (appbox-secitem-probe, installed as an app) fills the device's keychain
# with COUNT items (default 1,000: an app's keychain quota) through the broker of its `appbox launch`, then times
# SecItemCopyMatching round trips (one random item, its data, kSecMatchLimitOne) for SECONDS
# (default 10). Beside it, the per-call cost of the ways without a resident client: the
# host's `appbox keychain APP get` (a process start each: the Swift runtime, the device, the
# keychain), and `appbox-secitem get` from a shell script inside the sandbox (a static C
# process start plus one round trip). Prints Markdown (also written to
# Benchmarks/results/secitem.md).
set -euo pipefail
BIN_DIR=${1:?usage: secitem.sh BIN_DIR}
COUNT=${COUNT:-1000}
SECONDS_TIMED=${SECONDS_TIMED:-10}
HOST_RUNS=${HOST_RUNS:-30}
SHELL_RUNS=${SHELL_RUNS:-300}
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/appbox-secitem-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
root="$work/device"
appbox() { "$BIN_DIR/appbox" --root "$root" "$@"; }

bundle="$work/Probe.app"
mkdir -p "$bundle"
cp "$BIN_DIR/appbox-secitem-probe" "$bundle/probe"
cat >"$bundle/Info.plist" <<'PLIST'
<?xml version="1.0" encoding="UTF-8"?>
<plist version="1.0"><dict>
<key>CFBundleIdentifier</key><string>com.example.bench</string>
<key>CFBundleExecutable</key><string>probe</string>
<key>CFBundleVersion</key><string>1.0</string>
</dict></plist>
PLIST
cat >"$bundle/archived-expanded-entitlements.xcent" <<'PLIST'
<?xml version="1.0" encoding="UTF-8"?>
<plist version="1.0"><dict>
<key>application-identifier</key><string>ABCDE12345.com.example.bench</string>
<key>com.apple.developer.team-identifier</key><string>ABCDE12345</string>
</dict></plist>
PLIST
chmod -R a+rX "$work"
appbox install "$bundle" >/dev/null

report=$(appbox launch com.example.bench -- bench "$COUNT" "$SECONDS_TIMED")
field() { echo "$report" | tr ' ' '\n' | sed -n "s/^$1=//p" | tail -1; }
adds_per_second=$(field adds_per_second)
fill_seconds=$(echo "$report" | sed -n 's/^bench adds=.* seconds=\([0-9.]*\) .*/\1/p')
trips_per_second=$(field round_trips_per_second)
wrong=$(field wrong)
[ "$wrong" = 0 ] || { echo "secitem.sh: $wrong wrong answers" >&2; exit 1; }

# The host command, one process per call.
times_file="$work/host.times"
for ((i = 0; i < HOST_RUNS + 3; i++)); do
  account=$(printf 'item-%06d' $((RANDOM % COUNT)))
  start=$EPOCHREALTIME
  appbox keychain com.example.bench get --service bench --account "$account" >/dev/null
  end=$EPOCHREALTIME
  [ "$i" -ge 3 ] && echo $((${end/./} - ${start/./})) >>"$times_file"
done
host_ms=$(sort -n "$times_file" | awk '{ a[NR] = $1 } END { printf "%.2f", a[int((NR + 1) / 2)] / 1000 }')

# appbox-secitem from a shell script inside the sandbox, one process per call.
shell_out=$(appbox run com.example.bench -- /bin/sh -c '
  start=$(date +%s%N)
  i=0
  while [ $i -lt '"$SHELL_RUNS"' ]; do
    appbox-secitem get --service bench --account "$(printf "item-%06d" $((i * 7919 % '"$COUNT"')))" >/dev/null || exit 1
    i=$((i + 1))
  done
  echo $(( ($(date +%s%N) - start) / 1000 ))')
shell_ms=$(awk -v total="$shell_out" -v n="$SHELL_RUNS" 'BEGIN { printf "%.2f", total / n / 1000 }')

per_call() { awk -v r="$1" 'BEGIN { printf "%.3f", 1000 / r }'; }
rate() { awk -v ms="$1" 'BEGIN { printf "%.0f", 1000 / ms }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0fx", a / b }'; }
broker_ms=$(per_call "$trips_per_second")
out=$(cat <<MD
## The keychain from inside the sandbox: SecItemCopyMatching on a $COUNT-item keychain

$(uname -r), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg) when done; appbox as $(id -un).

| client | per call | calls per second | vs the broker's round trip |
|---|---:|---:|---:|
| a confined C client (libCSecItem), one session: round trips | $broker_ms ms | $trips_per_second | 1x |
| \`appbox-secitem get\` in a confined shell script (a process per call) | $shell_ms ms | $(rate "$shell_ms") | $(ratio "$shell_ms" "$broker_ms") |
| the host's \`appbox keychain APP get\` (a process per call) | $host_ms ms | $(rate "$host_ms") | $(ratio "$host_ms" "$broker_ms") |

Filling the keychain through the broker: $COUNT SecItemAdd calls in $fill_seconds s ($adds_per_second per second; each
is one SQLite transaction, synced). Round trips ask for one random item's data (kSecMatchLimitOne),
for ${SECONDS_TIMED} s; every answer was checked.
MD
)
echo "$out"
mkdir -p Benchmarks/results
echo "$out" >Benchmarks/results/secitem.md
