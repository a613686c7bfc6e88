#!/usr/bin/env bash
# The main job end to end on a throwaway device root: `make demo` runs this with the
# release build. Each step prints the command, then its output.
set -euo pipefail

BIN_DIR=${1:?usage: demo.sh BIN_DIR}
APPBOX="$BIN_DIR/appbox"
HERE=$(cd "$(dirname "$0")/.." && pwd)
FIXTURES="$HERE/Fixtures/bundles"
export APPBOX_ROOT=$(mktemp -d /tmp/appbox-demo.XXXXXX)
trap 'rm -rf "$APPBOX_ROOT"' EXIT

bold=$(tput bold 2>/dev/null || true)
dim=$(tput dim 2>/dev/null || true)
reset=$(tput sgr0 2>/dev/null || true)

# Prints a heading for a part of the tour.
section() { printf '\n%s== %s ==%s\n' "$bold" "$*" "$reset"; }

# Prints and runs one appbox command; a failing command fails the demo.
step() {
  printf '%s$ appbox %s%s\n' "$dim" "$*" "$reset"
  "$APPBOX" "$@"
}

# Prints and runs a command that is expected to fail; shows its exit status.
refused() {
  printf '%s$ appbox %s%s\n' "$dim" "$*" "$reset"
  set +e
  "$APPBOX" "$@" 2>&1
  local status=$?
  set -e
  printf '%s(exit status %d, as expected)%s\n' "$dim" "$status" "$reset"
  [ "$status" -ne 0 ]
}

section "A fresh device (root: $APPBOX_ROOT)"
step device init --name "Demo iPhone"

section "Install two apps of the same team"
step install "$FIXTURES/Notes-1.0/Notes.app"
step install "$FIXTURES/Journal-1.0/Journal.app"
step list

section "Inspect a home"
NOTES_HOME=$("$APPBOX" path com.example.notes)
printf 'hello from the demo\n' > "$NOTES_HOME/Documents/hello.txt"
head -c 200000 /dev/urandom > "$NOTES_HOME/Library/Caches/thumbnails.bin"
step inspect com.example.notes
step path com.example.notes documents

section "Refusals are one clear line with the spec's exit status"
refused install "$FIXTURES/Notes-2.0/Notes.app"
refused inspect com.example.missing

# Prints and runs an appbox command whose stdout (a snapshot id) the demo keeps.
capture() {
  printf '%s$ appbox %s%s\n' "$dim" "$*" "$reset" >&2
  "$APPBOX" "$@"
}

section "Back up an app's data"
mkdir -p "$NOTES_HOME/Documents/Drafts"
printf 'Dear Ada,\nthe first draft.\n' > "$NOTES_HOME/Documents/Drafts/letter.txt"
printf 'milk\neggs\n' > "$NOTES_HOME/Documents/list.txt"
printf 'scratch\n' > "$NOTES_HOME/tmp/scratch.txt"
FIRST=$(capture backup com.example.notes)
echo "$FIRST"

section "Change and delete files, then back up again (only what changed is stored)"
printf 'Dear Ada,\nthe second draft.\n' > "$NOTES_HOME/Documents/Drafts/letter.txt"
rm "$NOTES_HOME/Documents/list.txt"
printf 'a new idea\n' > "$NOTES_HOME/Documents/idea.txt"
SECOND=$(capture backup com.example.notes)
echo "$SECOND"
step snapshots com.example.notes
step diff "$FIRST" "$SECOND"

section "Restore the first snapshot (Caches and tmp end up empty)"
step restore com.example.notes --snapshot "$FIRST"
printf '%s$ ls -R Documents; cat Documents/Drafts/letter.txt%s\n' "$dim" "$reset"
(cd "$NOTES_HOME" && ls -R Documents && cat Documents/Drafts/letter.txt)
step check --read-data

printf '\n%sDemo finished.%s\n' "$bold" "$reset"
