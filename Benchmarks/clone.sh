#!/usr/bin/env bash
# make bench (and make bench-clone): `appbox device clone` of a device holding 10 apps and
# 100,000 files (FILES, default 100000: 10,000 small files of 1-8 KiB per app, in folders of
# 100), beside `cp -a` of the same root, and `cp -a --reflink=always` where the file system
# supports reflinks. Each is run RUNS times (default 3); the median wall time and the ratio to
# `cp -a` are printed as Markdown (and written to Benchmarks/results/clone.md). Target: at
# most 0.5x `cp -a` on ext4; O(1) per file on reflink file systems. WORK (default /tmp) is
# where the device and its copies live: point it at an XFS or btrfs mount for reflinks.
set -euo pipefail
BIN_DIR=${1:?usage: clone.sh BIN_DIR}
RUNS=${RUNS:-3}
FILES=${FILES:-100000}
cd "$(dirname "$0")/.."
work=$(mktemp -d "${WORK:-/tmp}/appbox-clone-XXXXXX")
trap 'rm -rf "$work"' EXIT
root="$work/device"
appbox="$BIN_DIR/appbox"

per_app=$((FILES / 10))
for n in $(seq 1 10); do
  bundle="$work/bundles/App$n/Notes.app"
  mkdir -p "$(dirname "$bundle")"
  cp -a Fixtures/bundles/Notes-1.0/Notes.app "$bundle"
  sed -i "s|<string>com.example.notes</string>|<string>com.example.bench$n</string>|" "$bundle/Info.plist"
  sed -i "s|com.example.notes|com.example.bench$n|" "$bundle/archived-expanded-entitlements.xcent"
  home=$("$appbox" --root "$root" --json install "$bundle" | sed -n 's/.*"home" *: *"\([^"]*\)".*/\1/p')
  python3 - "$home/Documents" "$per_app" "$n" <<'PY'
import os, random, sys
base, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
random.seed(seed)
for i in range(count):
    folder = os.path.join(base, "f%03d" % (i // 100))
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "n%05d.txt" % i), "wb") as f:
        f.write(os.urandom(random.randint(1024, 8192)))
PY
done
sync

# The median wall time (seconds) of RUNS runs of "$@" into a fresh $work/copy each time.
median() {
  local times=()
  for _ in $(seq 1 "$RUNS"); do
    rm -rf "$work/copy"
    sync
    local start end
    start=$(date +%s.%N)
    "$@" >/dev/null
    end=$(date +%s.%N)
    times+=("$(echo "$end - $start" | bc)")
  done
  printf '%s\n' "${times[@]}" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}

clone=$(median "$appbox" --root "$root" device clone "$work/copy")
cp_a=$(median cp -a "$root" "$work/copy")
reflink=""
if cp -a --reflink=always "$root/registry.db" "$work/probe" 2>/dev/null; then
  reflink=$(median cp -a --reflink=always "$root" "$work/copy")
fi
rm -f "$work/probe"
fs=$(findmnt -n -o FSTYPE -T "$work" 2>/dev/null || stat -f -c %T "$work")
ratio() { printf "%.2fx" "$(echo "scale=4; $1 / $cp_a" | bc)"; }
{
  echo "| clone of 10 apps, $FILES files ($fs) | median s | × cp -a |"
  echo "|---|---|---|"
  printf '| appbox device clone | %.2f | %s |\n' "$clone" "$(ratio "$clone")"
  printf '| cp -a | %.2f | 1.00x |\n' "$cp_a"
  if [ -n "$reflink" ]; then printf '| cp -a --reflink=always | %.2f | %s |\n' "$reflink" "$(ratio "$reflink")"; fi
} | tee Benchmarks/results/clone.md
