#!/usr/bin/env bash
# make bench (and make bench-startup): what starting a confined app costs.
#
# Times `appbox run APP -- /bin/true` beside the parts it is made of:
#   - appbox's own start (`appbox path APP`: the Swift process, the device, the registry),
#   - bare bubblewrap building the same namespaces, system view and binds around /bin/true
#     (the jail's part of `appbox run` is compared with it),
#   - unshare(1) making the namespaces, with appbox-sandbox confine (Landlock + seccomp)
#     and no bubblewrap,
#   - with APPBOX_BEFORE=DIR (the products directory of an older build), that build's
#     `appbox run` too, on a device it made itself.
# Each is run RUNS times (default 40), round robin, after 3 warm-up rounds; the median and
# the ratio to bare bubblewrap are printed as Markdown (and written to
# Benchmarks/results/startup.md).
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

# One run of "$@", in microseconds of wall time.
time_once() {
  local start=$EPOCHREALTIME end
  "$@" >/dev/null 2>&1 || true
  end=$EPOCHREALTIME
  echo $((${end/./} - ${start/./}))
}

# The median of the microsecond values in the file $1, in milliseconds with two decimals.
median_ms() {
  sort -n "$1" | awk '{ a[NR] = $1 } END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; printf "%.2f", m / 1000 }'
}

tops=()
for top in /bin /sbin /lib /lib64 /lib32 /libx32; do
  if [ -L "$top" ]; then tops+=(--symlink "$(readlink "$top")" "$top"); elif [ -d "$top" ]; then tops+=(--ro-bind "$top" "$top"); fi
done
etc=()
for file in ld.so.cache alternatives localtime timezone resolv.conf hosts nsswitch.conf services protocols ssl; do
  etc+=(--ro-bind-try "/etc/$file" "/etc/$file")
done
# The app's home, bound the way the jail shows it (bare bubblewrap, as this user, by path).
home=$("$BIN_DIR/appbox" --root "$root" path com.example.notes)
jail_home=/var/mobile/Applications/$(basename "$home")
binds=(--ro-bind "$home/Notes.app" "$jail_home/Notes.app" --bind "$home/Documents" "$jail_home/Documents"
  --bind "$home/Library" "$jail_home/Library" --bind "$home/tmp" "$jail_home/tmp" --bind "$home/tmp" /tmp)
bwrap_jail=(bwrap --unshare-all --unshare-user --share-net --die-with-parent --new-session --cap-drop ALL
  --ro-bind /usr /usr "${tops[@]}" "${etc[@]}" --proc /proc --dev /dev "${binds[@]}" --remount-ro / --remount-ro /dev
  /bin/true)
unshare_landlock=(unshare --user --map-root-user --mount --pid --ipc --uts --cgroup --fork --mount-proc
  "$BIN_DIR/appbox-sandbox" confine --rx /usr --ro /etc --ro /proc --dev /dev/null -- /bin/true)

commands=(run process bwrap unshare)
run_cmd=("$BIN_DIR/appbox" --root "$root" run com.example.notes -- /bin/true)
process_cmd=("$BIN_DIR/appbox" --root "$root" path com.example.notes)
if [ -n "${APPBOX_BEFORE:-}" ]; then
  "$APPBOX_BEFORE/appbox" --root "$work/before" install Fixtures/bundles/Notes-1.0/Notes.app >/dev/null
  before_cmd=("$APPBOX_BEFORE/appbox" --root "$work/before" run com.example.notes -- /bin/true)
  commands+=(before)
fi
# Round robin, so that whatever else the machine does weighs on every row alike.
for ((i = -3; i < RUNS; i++)); do
  for name in "${commands[@]}"; do
    case $name in
      run) t=$(time_once "${run_cmd[@]}") ;;
      process) t=$(time_once "${process_cmd[@]}") ;;
      bwrap) t=$(time_once "${bwrap_jail[@]}") ;;
      unshare) t=$(time_once "${unshare_landlock[@]}") ;;
      before) t=$(time_once "${before_cmd[@]}") ;;
    esac
    if [ "$i" -ge 0 ]; then echo "$t" >>"$work/$name.times"; fi  # the first 3 rounds warm up
  done
done
declare -A result
for name in "${commands[@]}"; do result[$name]=$(median_ms "$work/$name.times"); done

ratio() { awk -v a="$1" -v b="${result[bwrap]}" 'BEGIN { printf "%.2fx", a / b }'; }
jail=$(awk -v a="${result[run]}" -v b="${result[process]}" 'BEGIN { printf "%.2f", a - b }')
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
  echo "| the jail's part (the first row minus appbox's own start) | $jail ms | $(ratio "$jail") |"
  echo "| bare \`bwrap\` (the same namespaces, system view and binds) | ${result[bwrap]} ms | 1.00x |"
  echo "| \`unshare\` + \`appbox-sandbox confine\` (Landlock, seccomp) | ${result[unshare]} ms | $(ratio "${result[unshare]}") |"
} | tee Benchmarks/results/startup.md
