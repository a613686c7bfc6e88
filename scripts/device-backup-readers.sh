#!/usr/bin/env bash
# The independent readers of iOS device backups that the tests check appbox's exports with:
# pyiosbackup (plain and encrypted backups) and iphone_backup_decrypt (encrypted ones), from
# PyPI, in a virtualenv of their own (test-only: nothing of it is installed for appbox itself).
# Prints the virtualenv's python on stdout. Idempotent, and safe to run from parallel tests.
#   APPBOX_DEVICE_BACKUP_READERS=DIR   where the virtualenv lives (default .build/device-backup-readers)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${APPBOX_DEVICE_BACKUP_READERS:-$PWD/.build/device-backup-readers}
packages="pyiosbackup==0.2.4 iphone-backup-decrypt==0.11.2"
mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9
if [ ! -x "$dir/bin/python" ] || [ "$(cat "$dir/.installed" 2>/dev/null)" != "$packages" ]; then
  rm -rf "$dir"
  python3 -m venv "$dir" >&2
  # shellcheck disable=SC2086 # the package list is meant to split
  "$dir/bin/pip" install --quiet --disable-pip-version-check $packages >&2
  echo "$packages" >"$dir/.installed"
fi
echo "$dir/bin/python"
