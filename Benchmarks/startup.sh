#!/usr/bin/env bash
# make bench (and make bench-startup): what starting a confined app costs.
#
# Times `appbox run APP -- /bin/true` beside the parts it is made of:
#   - appbox's own start (`appbox path APP`: the Swift process, the device, the registry),
#   - bare bubblewrap building the same namespaces and system view around /bin/true,
#   - unshare(1) making the namespaces, with appbox-sandbox confine (Landlock + seccomp)
#     and no bubblewrap,
#   - with APPBOX_BEFORE=DIR (the products directory of an older build), that build's
#     `appbox run` too, on a device it made itself.
# Each is run RUNS times (default 40) after 3 warm-up runs; the median and the ratio to
# bare bubblewrap are printed as Markdown (and written to Benchmarks/results/startup.md).
# Run as root, appbox confines the app as its own uid; unprivileged, as the caller.
set -euo pipefail
BIN_DIR=${1:?usage: startup.sh BIN_DIR}
RUNS=${RUNS:-40}
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/appbox-startup-XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"

root="$work/device"
"$BIN_DIR/appbox" --root "$root" install Fixtures/bundles/Notes-1.0/Notes.app >/dev/null

# Median wall time, in milliseconds with two decimals, of RUNS runs of "$@".
median() {
  local times=() start end i
  for i in 1 2 3; do "$@" >/dev/null 2>&1 || true; done
  for ((i = 0; i < RUNS; i++)); do
    start=$EPOCHREALTIME
    "$@" >/dev/null 2>&1 || true
    end=$EPOCHREALTIME
    times+=("$(((${end/./} - ${start/./})))")
  done
  printf '%s\n' "${times[@]}" | sort -n | awk '{ a[NR] = $1 } END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; printf "%.2f", m / 1000 }'
}

tops=()
for top in /bin /sbin /lib /lib64 /lib32 /libx32; do
  if [ -L "$top" ]; then tops+=(--symlink "$(readlink "$top")" "$top"); elif [ -d "$top" ]; then tops+=(--ro-bind "$top" "$top"); fi
done
bwrap_jail=(bwrap --unshare-all --unshare-user --share-net --die-with-parent --new-session --cap-drop ALL
  --ro-bind /usr /usr "${tops[@]}" --proc /proc --dev /dev --remount-ro / /bin/true)
unshare_landlock=(unshare --user --map-root-user --mount --pid --ipc --uts --cgroup --fork --mount-proc
  "$BIN_DIR/appbox-sandbox" confine --rx /usr --ro /etc --ro /proc --dev /dev/null -- /bin/true)

declare -A result
result[run]=$(median "$BIN_DIR/appbox" --root "$root" run com.example.notes -- /bin/true)
result[process]=$(median "$BIN_DIR/appbox" --root "$root" path com.example.notes)
result[bwrap]=$(median "${bwrap_jail[@]}")
result[unshare]=$(median "${unshare_landlock[@]}")
if [ -n "${APPBOX_BEFORE:-}" ]; then
  "$APPBOX_BEFORE/appbox" --root "$work/before" install Fixtures/bundles/Notes-1.0/Notes.app >/dev/null
  result[before]=$(median "$APPBOX_BEFORE/appbox" --root "$work/before" run com.example.notes -- /bin/true)
fi

ratio() { awk -v a="$1" -v b="${result[bwrap]}" 'BEGIN { printf "%.2fx", a / b }'; }
{
  echo "## Starting a confined app ($(id -un), median of $RUNS runs, $(nproc) cores)"
  echo
  echo "| what | median | vs bare bwrap |"
  echo "|---|---:|---:|"
  echo "| \`appbox run APP -- /bin/true\` (sandbox v2) | ${result[run]} ms | $(ratio "${result[run]}") |"
  if [ -n "${result[before]:-}" ]; then
    echo "| \`appbox run APP -- /bin/true\` (before: Landlock only) | ${result[before]} ms | $(ratio "${result[before]}") |"
  fi
  echo "| appbox's own start (\`appbox path APP\`) | ${result[process]} ms | $(ratio "${result[process]}") |"
  echo "| bare \`bwrap\` (same namespaces and system view) | ${result[bwrap]} ms | 1.00x |"
  echo "| \`unshare\` + \`appbox-sandbox confine\` (Landlock, seccomp) | ${result[unshare]} ms | $(ratio "${result[unshare]}") |"
} | tee Benchmarks/results/startup.md
