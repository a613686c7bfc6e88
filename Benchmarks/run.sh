#!/usr/bin/env bash
# make bench / make bench-large / make bench-huge: the side-by-side benchmark with the release build.
set -euo pipefail
SIZE=${1:?usage: run.sh small|large|huge BIN_DIR}
BIN_DIR=${2:?usage: run.sh small|large|huge BIN_DIR}
cd "$(dirname "$0")/.."
if [ "$SIZE" = small ]; then
  "$BIN_DIR/appbox-bench" archive-throughput --results Benchmarks/results
  "$BIN_DIR/appbox-bench" device-backup --appbox "$BIN_DIR/appbox" --results Benchmarks/results
fi
exec "$BIN_DIR/appbox-bench" run "$SIZE" --appbox "$BIN_DIR/appbox" --results Benchmarks/results
