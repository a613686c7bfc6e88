#!/usr/bin/env bash
# The main job end to end on a throwaway device root: `make demo` runs this with the
# release build. Each step prints the command, then its output. The tour: a device,
# install, inspect, confined run, preferences and file sharing, the keychain, backup,
# change, incremental backup, restore, update (with the keychain item surviving), revert,
# export and import (an .xcappdata package, a whole-home tar, holes kept), and the refusals.
set -euo pipefail

BIN_DIR=${1:?usage: demo.sh BIN_DIR}
APPBOX="$BIN_DIR/appbox"
HERE=$(cd "$(dirname "$0")/.." && pwd)
FIXTURES="$HERE/Fixtures/bundles"
export APPBOX_ROOT=$(mktemp -d /tmp/appbox-demo.XXXXXX)
DEMO_FILES=$(mktemp -d /tmp/appbox-demo-files.XXXXXX)
trap 'rm -rf "$APPBOX_ROOT" "$DEMO_FILES"' EXIT

bold=$(tput bold 2>/dev/null || true)
dim=$(tput dim 2>/dev/null || true)
reset=$(tput sgr0 2>/dev/null || true)

# Prints a heading for a part of the tour.
section() { printf '\n%s== %s ==%s\n' "$bold" "$*" "$reset"; }

# Prints a command line, single-quoting arguments a shell would split.
show() {
  local line="$" arg
  for arg in "$@"; do
    case $arg in
      *[[:space:]\;\>\<\|\&\$\'\"]*) line+=" '${arg//\'/\'\\\'\'}'" ;;
      *) line+=" $arg" ;;
    esac
  done
  printf '%s%s%s\n' "$dim" "$line" "$reset"
}

# Prints and runs one appbox command; a failing command fails the demo.
step() {
  show appbox "$@"
  "$APPBOX" "$@"
}

# Prints and runs an appbox command whose stdout (a snapshot id) the demo keeps.
capture() {
  show appbox "$@" >&2
  "$APPBOX" "$@"
}

# Prints and runs a command that is expected to fail; shows its exit status.
refused() {
  show appbox "$@"
  set +e
  "$APPBOX" "$@" 2>&1
  local status=$?
  set -e
  printf '%s(exit status %d, as expected)%s\n' "$dim" "$status" "$reset"
  [ "$status" -ne 0 ]
}

section "A fresh device (root: $APPBOX_ROOT)"
step device init --name "Demo iPhone"

section "Install: validate, seal, and give each app a private home"
step install "$FIXTURES/Notes-1.0/Notes.app"
step install "$FIXTURES/Journal-1.0/Journal.app"
step install "$FIXTURES/Other-1.0/Other.app"
step list

section "Inspect a home: locations, files, bytes and backup policy"
NOTES_HOME=$("$APPBOX" path com.example.notes)
printf 'hello from the demo\n' > "$NOTES_HOME/Documents/hello.txt"
head -c 200000 /dev/urandom > "$NOTES_HOME/Library/Caches/thumbnails.bin"
step inspect com.example.notes
step path com.example.notes documents

section "Run inside the sandbox (Landlock): the home is writable, the rest of the device is not"
step run com.example.notes -- /bin/sh -c 'echo "written by the app" > Documents/hi.txt; cat Documents/hi.txt; ls "$HOME"'
refused run com.example.notes -- /bin/sh -c 'cat ../../registry.db'
refused run com.example.notes -- /bin/sh -c 'echo evil >> Notes.app/Notes'
refused run com.example.notes -- /bin/sh -c "ls $APPBOX_ROOT/ApplicationRoot/$("$APPBOX" path com.example.journal | xargs basename)/Documents"
step launch com.example.notes

section "Preferences, file sharing and backup exclusion"
step defaults com.example.notes write username ada
step defaults com.example.notes write launchCount 3 --type int
step defaults com.example.notes read
printf 'a shared document\n' > "$DEMO_FILES/shared.txt"
head -c 3000000 /dev/urandom > "$DEMO_FILES/big.bin"
step files com.example.notes push "$DEMO_FILES/shared.txt"
step files com.example.notes push "$DEMO_FILES/big.bin"
step files com.example.notes ls
refused files com.example.notes pull ../../registry.db
step run com.example.notes -- /bin/sh -c 'ln -s ../../../registry.db Documents/escape && ls -l Documents/escape'
refused files com.example.notes pull escape
refused files com.example.journal ls
step exclude com.example.notes Documents/big.bin
step inspect com.example.notes

section "Keychain: encrypted outside the sandbox, shared within a team, refused across teams"
show printf %s "correct horse battery staple" \| appbox keychain com.example.notes add --service sync \
  --account ada --group ABCDE12345.shared --label "Sync token" --data-file -
printf %s "correct horse battery staple" | "$APPBOX" keychain com.example.notes add --service sync \
  --account ada --group ABCDE12345.shared --label "Sync token" --data-file -
step keychain com.example.journal get --service sync --account ada
printf '\n'
step keychain com.example.journal list
refused keychain org.other.app get --service sync --account ada --group ABCDE12345.shared
if grep -rqF "correct horse battery staple" "$APPBOX_ROOT"; then
  echo "the secret is in plain text under the root" >&2
  exit 1
fi
printf '%s(the secret appears nowhere under %s in plain text)%s\n' "$dim" "$APPBOX_ROOT" "$reset"

section "Back up: the first snapshot stores the data and the bundle"
mkdir -p "$NOTES_HOME/Documents/Drafts"
printf 'Dear Ada,\nthe first draft.\n' > "$NOTES_HOME/Documents/Drafts/letter.txt"
printf 'milk\neggs\n' > "$NOTES_HOME/Documents/list.txt"
printf 'scratch\n' > "$NOTES_HOME/tmp/scratch.txt"
FIRST=$(capture backup com.example.notes)
echo "$FIRST"

section "Change and delete files, then back up again: only what changed is stored"
printf 'Dear Ada,\nthe second draft.\n' > "$NOTES_HOME/Documents/Drafts/letter.txt"
rm "$NOTES_HOME/Documents/list.txt"
printf 'a new idea\n' > "$NOTES_HOME/Documents/idea.txt"
SECOND=$(capture backup com.example.notes)
echo "$SECOND"
step snapshots com.example.notes
step diff "$FIRST" "$SECOND"

section "Restore the first snapshot: Documents and Library as they were, Caches and tmp empty"
step restore com.example.notes --snapshot "$FIRST"
printf '%s$ ls -R Documents && cat Documents/Drafts/letter.txt && ls Library/Caches tmp%s\n' "$dim" "$reset"
(cd "$NOTES_HOME" && ls -R Documents && cat Documents/Drafts/letter.txt && ls Library/Caches tmp)
step check --read-data

section "Update Notes 1.0 -> 2.0: a pre-update snapshot, a new home, the data moved with rename(2)"
mkdir -p "$NOTES_HOME/Library/Application Support"
printf '{"database": "%s/Documents/notes.db"}\n' "$NOTES_HOME" > "$NOTES_HOME/Library/Application Support/config.json"
step update com.example.notes "$FIXTURES/Notes-2.0/Notes.app"
NOTES_HOME=$("$APPBOX" path com.example.notes)
step list
show cat Documents/Drafts/letter.txt
cat "$NOTES_HOME/Documents/Drafts/letter.txt"
printf '%s(the keychain item survives the update:)%s\n' "$dim" "$reset"
step keychain com.example.notes get --service sync --account ada
printf '\n'

section "Revert to 1.0 and its data (the 2.0 data is snapshotted first)"
printf 'written by 2.0\n' > "$NOTES_HOME/Documents/from-2.0.txt"
step revert com.example.notes
step list

section "Export and import: an Xcode .xcappdata package, a whole-home tar, holes kept, damage refused"
NOTES_HOME=$("$APPBOX" path com.example.notes)
truncate -s 1G "$NOTES_HOME/Documents/disk.img"
printf 'a 1 GB disk image with 20 bytes of data' | dd of="$NOTES_HOME/Documents/disk.img" conv=notrunc status=none
step export com.example.notes "$DEMO_FILES/Notes.xcappdata"
show find Notes.xcappdata -maxdepth 2
(cd "$DEMO_FILES" && find Notes.xcappdata -maxdepth 2 | sort)
printf 'edited after the export\n' > "$NOTES_HOME/Documents/from-2.0.txt"
step import com.example.notes "$DEMO_FILES/Notes.xcappdata"
show du -h --apparent-size Documents/disk.img
du -h --apparent-size "$NOTES_HOME/Documents/disk.img" | cut -f1
show du -h Documents/disk.img
du -h "$NOTES_HOME/Documents/disk.img" | cut -f1
show tar --sparse -C HOME -cf home.tar .
tar --sparse -C "$NOTES_HOME" -cf "$DEMO_FILES/home.tar" .
step import com.example.notes "$DEMO_FILES/home.tar"
head -c 1500 "$DEMO_FILES/home.tar" > "$DEMO_FILES/cut.tar"
refused import com.example.notes "$DEMO_FILES/cut.tar"
head -c 10240 /dev/zero > "$DEMO_FILES/empty.tar"
refused import com.example.notes "$DEMO_FILES/empty.tar"

section "Refusals are one clear line with the spec's exit status"
refused install "$FIXTURES/Notes-2.0/Notes.app"
refused update com.example.notes "$FIXTURES/Journal-1.0/Journal.app"
refused revert com.example.notes
refused inspect com.example.missing

printf '\n%sDemo finished.%s\n' "$bold" "$reset"
