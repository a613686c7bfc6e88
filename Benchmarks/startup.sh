#!/usr/bin/env bash
# make bench (and make bench-startup): what starting a confined app costs.
#
# Times `appbox run APP -- /bin/true` (the app in a network namespace of its own, connected by
# pasta) and `appbox run APP --network host -- /bin/true` (no pasta) beside the parts they are
# made of:
#   - appbox's own start (`appbox path APP`: the Swift process, the device, the registry),
#   - bare bubblewrap building the same namespaces, system view and binds around /bin/true
#     (the jail's part of `appbox run` is compared with it),
#   - a minimal bubblewrap: `bwrap --unshare-all` with /usr and its top-level links only, the
#     least that runs /bin/true in new namespaces (issue 28's second yardstick),
#   - bare pasta making a network namespace (and its user namespace) and running that same
#     bubblewrap in it (pasta refuses to start a command as root: as root, both run as nobody),
#   - unshare(1) making the namespaces, with appbox-sandbox confine (Landlock + seccomp)
#     and no bubblewrap,
#   - with APPBOX_BEFORE=DIR (the products directory of an older build), that build's
#     `appbox run` too, on a device it made itself.
# Each is run RUNS times (default 40), round robin, after 3 warm-up rounds; the median wall
# time, the mean CPU time (less sensitive to a busy machine) and the ratios to bare
# bubblewrap are printed as Markdown (and written to Benchmarks/results/startup.md).
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

# The CPU time (user + system, in microseconds) this shell's waited-for children had used
# when `times` wrote the file $1 (`times` must run in this shell, not in a subshell).
children_cpu() {
  tail -n 1 "$1" | awk '{
    total = 0
    for (i = 1; i <= 2; i++) { split($i, t, "m"); sub("s", "", t[2]); total += t[1] * 60 + t[2] }
    printf "%d", total * 1000000 }'
}

# One run of "$@": appends its wall time to $name.times and its CPU time (the whole tree
# it waits for) to $name.cpu, in microseconds.
time_once() {
  local name=$1 start end cpu_before cpu_after
  shift
  times >"$work/times.before"
  start=$EPOCHREALTIME
  "$@" >/dev/null 2>&1 || true
  end=$EPOCHREALTIME
  times >"$work/times.after"
  cpu_before=$(children_cpu "$work/times.before")
  cpu_after=$(children_cpu "$work/times.after")
  if [ "$round" -ge 0 ]; then  # the first 3 rounds warm up
    echo $((${end/./} - ${start/./})) >>"$work/$name.times"
    echo $((cpu_after - cpu_before)) >>"$work/$name.cpu"
  fi
}

# The mean of the microsecond values in the file $1, in milliseconds with two decimals.
mean_ms() { awk '{ s += $1 } END { printf "%.2f", s / NR / 1000 }' "$1"; }

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
bwrap_minimal=(bwrap --unshare-all --die-with-parent --ro-bind /usr /usr "${tops[@]}" /bin/true)
as_user=()
if [ "$(id -u)" = 0 ]; then as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups --); fi
pasta_bwrap=("${as_user[@]}" pasta --config-net --quiet -t none -u none -T none -U none --no-map-gw --no-dhcp
  --no-dhcpv6 --no-ra -- "${bwrap_jail[@]}")
unshare_landlock=(unshare --user --map-root-user --mount --pid --ipc --uts --cgroup --fork --mount-proc
  "$BIN_DIR/appbox-sandbox" confine --rx /usr --ro /etc --ro /proc --dev /dev/null -- /bin/true)

commands=(run runhost process bwrap minimal pasta unshare)
run_cmd=("$BIN_DIR/appbox" --root "$root" run com.example.notes -- /bin/true)
runhost_cmd=("$BIN_DIR/appbox" --root "$root" run com.example.notes --network host -- /bin/true)
process_cmd=("$BIN_DIR/appbox" --root "$root" path com.example.notes)
if [ -n "${APPBOX_BEFORE:-}" ]; then
  "$APPBOX_BEFORE/appbox" --root "$work/before" install Fixtures/bundles/Notes-1.0/Notes.app >/dev/null
  before_cmd=("$APPBOX_BEFORE/appbox" --root "$work/before" run com.example.notes -- /bin/true)
  commands+=(before)
fi
# Round robin, so that whatever else the machine does weighs on every row alike.
for ((round = -3; round < RUNS; round++)); do
  for name in "${commands[@]}"; do
    case $name in
      run) time_once run "${run_cmd[@]}" ;;
      runhost) time_once runhost "${runhost_cmd[@]}" ;;
      pasta) time_once pasta "${pasta_bwrap[@]}" ;;
      process) time_once process "${process_cmd[@]}" ;;
      bwrap) time_once bwrap "${bwrap_jail[@]}" ;;
      minimal) time_once minimal "${bwrap_minimal[@]}" ;;
      unshare) time_once unshare "${unshare_landlock[@]}" ;;
      before) time_once before "${before_cmd[@]}" ;;
    esac
  done
done
declare -A result cpu
for name in "${commands[@]}"; do
  result[$name]=$(median_ms "$work/$name.times")
  cpu[$name]=$(mean_ms "$work/$name.cpu")
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
minus() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a - b }'; }
jail=$(minus "${result[run]}" "${result[process]}")
jail_cpu=$(minus "${cpu[run]}" "${cpu[process]}")
jail_host=$(minus "${result[runhost]}" "${result[process]}")
jail_host_cpu=$(minus "${cpu[runhost]}" "${cpu[process]}")
row() {  # label, wall, cpu
  echo "| $1 | $2 ms | $(ratio "$2" "${result[bwrap]}") | $(ratio "$2" "${result[minimal]}") | $3 ms | $(ratio "$3" "${cpu[bwrap]}") |"
}
{
  echo "## Starting a confined app ($(id -un), $RUNS runs each, round robin, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg))"
  echo
  echo "| what | wall (median) | vs bare bwrap | vs minimal bwrap | CPU (mean) | vs bare bwrap |"
  echo "|---|---:|---:|---:|---:|---:|"
  row "\`appbox run APP -- /bin/true\` (its own network: pasta)" "${result[run]}" "${cpu[run]}"
  row "\`appbox run APP --network host -- /bin/true\` (no pasta)" "${result[runhost]}" "${cpu[runhost]}"
  if [ -n "${result[before]:-}" ]; then
    row "\`appbox run APP -- /bin/true\` (the build in APPBOX_BEFORE)" "${result[before]}" "${cpu[before]}"
  fi
  row "appbox's own start (\`appbox path APP\`)" "${result[process]}" "${cpu[process]}"
  row "the jail's part, own network (the first row minus appbox's own start)" "$jail" "$jail_cpu"
  row "the jail's part, host network (the second row minus appbox's own start)" "$jail_host" "$jail_host_cpu"
  row "bare \`bwrap\` (the same namespaces, system view and binds)" "${result[bwrap]}" "${cpu[bwrap]}"
  row "minimal \`bwrap --unshare-all\` (/usr and its links, /bin/true)" "${result[minimal]}" "${cpu[minimal]}"
  row "bare \`pasta -- bwrap\` (that bwrap in a network pasta connects)" "${result[pasta]}" "${cpu[pasta]}"
  row "\`unshare\` + \`appbox-sandbox confine\` (Landlock, seccomp)" "${result[unshare]}" "${cpu[unshare]}"
  echo
  echo "CPU is user + system time of the command and every process it waited for (the jail's"
  echo "pid 1, reaped by the kernel's init once bubblewrap exits, is not counted; pasta under"
  echo "\`appbox run\` is counted only when appbox reaped it, on another thread, before it exited)."
  echo
  echo "pasta adds $(minus "${result[run]}" "${result[runhost]}") ms (wall, median) to \`appbox run\`; the jail's part with"
  echo "its own network is $(ratio "$jail" "${result[pasta]}") bare \`pasta -- bwrap\`."
} | tee Benchmarks/results/startup.md
