#!/usr/bin/env bash
# What the second SHA-256 pass costs an in-place incremental (docs/performance.md, "What removing
# the second pass would give"): the whole-file hash of a chunked file, beside each chunk's.
#
#   bash Benchmarks/experiments/second-pass.sh PATCHED_BIN_DIR [small|large] [ROUNDS]
#
# PATCHED_BIN_DIR holds a release build with no-whole-hash.patch applied (never commit it: with
# APPBOX_EXPERIMENT_NO_WHOLE_HASH set, a chunked file's identity is a random digest, so such a
# repository's snapshots do not verify), beside appbox-bench:
#
#   git apply Benchmarks/experiments/no-whole-hash.patch
#   swift build -c release --static-swift-stdlib && cp .build/release/appbox* DIR/
#   git checkout Sources/AppboxBackup/Backup/StreamHasher.swift
#
# The benchmark's home (small: 10,000 files, 150 MB; large: 100,000 files, 1.5 GB) with the
# in-place workload's files; the same binary backs up into two repositories, one as shipped and
# one without the whole-file hash, and GNU tar level 1 keeps its own chain; then ROUNDS rounds
# of the in-place workload (`appbox-bench mutate --in-place`), each backed up by the three in
# rotated order after a sync. Prints each round's wall time, its ratio to GNU tar's and the CPU
# time.
set -euo pipefail
BIN=${1:?usage: second-pass.sh PATCHED_BIN_DIR [small|large] [ROUNDS]}
SIZE=${2:-large}
ROUNDS=${3:-8}
case $SIZE in
  small) files=10000 bytes=150000000 ;;
  large) files=100000 bytes=1500000000 ;;
  *) echo "second-pass.sh: size is small or large, not '$SIZE'" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/../.."
work=$(mktemp -d /tmp/appbox-second-pass-XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
ab() { "$BIN/appbox" --root "$work/device" --quiet "$@"; }
ab install Fixtures/bundles/Notes-1.0/Notes.app >/dev/null
home=$("$BIN/appbox" --root "$work/device" path com.example.notes)
"$BIN/appbox-bench" generate "$home" --files $files --bytes $bytes --seed 1 >/dev/null
"$BIN/appbox-bench" in-place-files "$home" --seed 1 >/dev/null
excludes=(--exclude=./Notes.app --exclude=./Library/Caches --exclude=./tmp)
for variant in shipped no-whole-hash; do ab repo init --repo "$work/repo-$variant"; done
ab backup com.example.notes --repo "$work/repo-shipped"
APPBOX_EXPERIMENT_NO_WHOLE_HASH=1 ab backup com.example.notes --repo "$work/repo-no-whole-hash"
tar -C "$home" "${excludes[@]}" --listed-incremental="$work/snar" -cf "$work/l0.tar" .
timed() {  # label command...: appends "label round wall cpu" to $work/times
  local label=$1
  shift
  sync
  /usr/bin/time -o "$work/one" -f "%e %U %S" "$@" >/dev/null 2>&1
  echo "$label $round $(awk '{ print $1, $2 + $3 }' "$work/one")" >>"$work/times"
}
for ((round = 1; round <= ROUNDS; round++)); do
  "$BIN/appbox-bench" mutate "$home" --percent 1 --seed $((500 + round)) --in-place >/dev/null
  sleep 0.3  # past the racy window: the backups trust what they stat
  cp "$work/snar" "$work/snar.$round"
  order=(shipped no-whole-hash tar)
  case $((round % 3)) in 1) order=(no-whole-hash tar shipped) ;; 2) order=(tar shipped no-whole-hash) ;; esac
  for variant in "${order[@]}"; do
    case $variant in
      shipped) timed shipped "$BIN/appbox" --root "$work/device" --quiet backup com.example.notes \
        --repo "$work/repo-shipped" ;;
      no-whole-hash) timed no-whole-hash env APPBOX_EXPERIMENT_NO_WHOLE_HASH=1 "$BIN/appbox" \
        --root "$work/device" --quiet backup com.example.notes --repo "$work/repo-no-whole-hash" ;;
      tar) timed tar tar -C "$home" "${excludes[@]}" --listed-incremental="$work/snar.$round" \
        -cf "$work/l1-$round.tar" . ;;
    esac
  done
  mv "$work/snar.$round" "$work/snar"
done
echo "| round | shipped | / GNU tar | CPU | no whole-file hash | / GNU tar | CPU | GNU tar level 1 |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
awk '{ wall[$1, $2] = $3; cpu[$1, $2] = $4; if ($2 > rounds) rounds = $2 }
  END { for (r = 1; r <= rounds; r++)
    printf "| %d | %.2f s | %.2fx | %.2f s | %.2f s | %.2fx | %.2f s | %.2f s |\n", r,
      wall["shipped", r], wall["shipped", r] / wall["tar", r], cpu["shipped", r],
      wall["no-whole-hash", r], wall["no-whole-hash", r] / wall["tar", r], cpu["no-whole-hash", r],
      wall["tar", r] }' "$work/times"
