#!/usr/bin/env bash
# Two builds of appbox side by side on one generated home (docs/performance.md, lazy chunking):
#
#   [CONTENT=random|mixed] [ROUNDS=3] bash Benchmarks/before-after.sh BEFORE_BIN_DIR AFTER_BIN_DIR [RUNS]
#
# 3,000 files and the in-place workload's database and media files (about 280 MB; CONTENT=mixed
# lays them out as data that compresses, as `run --content mixed` does); each build backs up
# into a repository of its own: RUNS full backups (--full, default 5), alternating which build
# goes first, then ROUNDS rounds of the benchmark's in-place workload (`appbox-bench mutate
# --in-place`), each backed up by both, and by restic when it is installed. Prints, per build,
# the median wall, user and system time of the full backups and, per round, each build's time
# and the bytes its repository grew by (and that over restic's). CPU time is the figure to
# read on a busy machine: wall time swings with the load.
set -euo pipefail
BEFORE=${1:?usage: before-after.sh BEFORE_BIN_DIR AFTER_BIN_DIR [RUNS]}
AFTER=${2:?usage: before-after.sh BEFORE_BIN_DIR AFTER_BIN_DIR [RUNS]}
RUNS=${3:-5}
CONTENT=${CONTENT:-random}
ROUNDS=${ROUNDS:-3}
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/appbox-before-after-XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
"$AFTER/appbox" --root "$work/device" install Fixtures/bundles/Notes-1.0/Notes.app >/dev/null
home=$("$AFTER/appbox" --root "$work/device" path com.example.notes)
"$AFTER/appbox-bench" generate "$home" --files 3000 --bytes 100000000 --seed 1 --content "$CONTENT" >/dev/null
"$AFTER/appbox-bench" in-place-files "$home" --seed 1 --content "$CONTENT" >/dev/null
binary() { if [ "$1" = before ]; then echo "$BEFORE/appbox"; else echo "$AFTER/appbox"; fi; }
# Each build makes its own repository (a newer catalog schema is refused by an older build).
for build in before after; do "$(binary "$build")" --root "$work/device" --quiet repo init --repo "$work/repo-$build"; done
timed() {  # build label command...: appends "build label wall user system" to $work/times
  local build=$1 label=$2
  shift 2
  sync
  /usr/bin/time -o "$work/one" -f "%e %U %S" "$@" >/dev/null 2>&1
  echo "$build $label $(tail -n 1 "$work/one")" >>"$work/times"
}
for ((run = 0; run < RUNS; run++)); do
  order=(before after)
  if [ $((run % 2)) = 1 ]; then order=(after before); fi
  for build in "${order[@]}"; do
    timed "$build" full "$(binary "$build")" --root "$work/device" backup com.example.notes \
      --repo "$work/repo-$build" --full
  done
done
export RESTIC_PASSWORD=before-after
with_restic=false
if command -v restic >/dev/null; then
  with_restic=true
  excludes=(--exclude "$home/Notes.app" --exclude "$home/Library/Caches" --exclude "$home/tmp")
  restic -q -r "$work/repo-restic" init
  restic -q -r "$work/repo-restic" backup "${excludes[@]}" "$home" >/dev/null
fi
for ((round = 1; round <= ROUNDS; round++)); do
  "$AFTER/appbox-bench" mutate "$home" --percent 1 --seed $((500 + round)) --in-place --content "$CONTENT" >/dev/null
  sleep 0.3  # past the racy window: the backups trust what they stat
  if $with_restic; then
    size=$(du -sb "$work/repo-restic" | cut -f1)
    restic -q -r "$work/repo-restic" backup "${excludes[@]}" "$home" >/dev/null
    echo "restic in-place-$round $(($(du -sb "$work/repo-restic" | cut -f1) - size))" >>"$work/bytes"
  fi
  for build in before after; do
    size=$(du -sb "$work/repo-$build" | cut -f1)
    timed "$build" "in-place-$round" "$(binary "$build")" --root "$work/device" backup com.example.notes \
      --repo "$work/repo-$build"
    echo "$build in-place-$round $(($(du -sb "$work/repo-$build" | cut -f1) - size))" >>"$work/bytes"
  done
done
echo "| build | full: wall | user | system | in-place 1..$ROUNDS: wall | bytes stored |"
echo "|---|---:|---:|---:|---|---|"
for build in before after; do
  medians=$(awk -v b="$build" '$1 == b && $2 == "full" { print $3, $4, $5 }' "$work/times" |
    sort -n | awk '{ w[NR] = $1 } END { printf "%s", w[int((NR + 1) / 2)] }')
  users=$(awk -v b="$build" '$1 == b && $2 == "full" { print $4 }' "$work/times" | sort -n |
    awk '{ u[NR] = $1 } END { printf "%s", u[int((NR + 1) / 2)] }')
  systems=$(awk -v b="$build" '$1 == b && $2 == "full" { print $5 }' "$work/times" | sort -n |
    awk '{ s[NR] = $1 } END { printf "%s", s[int((NR + 1) / 2)] }')
  walls=$(awk -v b="$build" '$1 == b && $2 ~ /^in-place/ { printf "%s s ", $3 }' "$work/times")
  bytes=$(awk -v b="$build" '$1 == b { printf "%.1f MB ", $3 / 1e6 }' "$work/bytes")
  echo "| $build | $medians s | $users s | $systems s | $walls| $bytes|"
  if $with_restic; then
    ratios=$(awk -v b="$build" '$1 == "restic" { r[$2] = $3 } $1 == b { s[$2] = $3; o[++n] = $2 }
      END { for (i = 1; i <= n; i++) printf "%.2fx ", s[o[i]] / r[o[i]] }' "$work/bytes")
    echo "| $build / restic | | | | | $ratios|"
  fi
done
if $with_restic; then
  echo "| restic | | | | | $(awk '$1 == "restic" { printf "%.1f MB ", $3 / 1e6 }' "$work/bytes")|"
fi
