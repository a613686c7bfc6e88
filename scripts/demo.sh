#!/usr/bin/env bash
# The main job end to end on a throwaway device root: `make demo` runs this with the
# release build. Each step prints the command, then its output. The tour: a device,
# install, inspect, confined run (the sandbox v2 jail), preferences and file sharing, the keychain
# (from the host, then from inside the sandbox through the broker), backup,
# change, incremental backup, restore, browsing (ls, dump, find, a tag, a one-file restore,
# a plain copy, a FUSE mount), update (with the keychain item surviving), revert,
# an app group shared by Notes and Journal, file protection (as root: on a small encrypted ext4 image), hostile homes (escaped names,
# a planted preferences link, a deep tree, backups in parallel), why and advise (with a
# screenshot of the advice page), a fleet of two devices sharing an S3 bucket (a Swift cluster
# on loopback), encrypted backups restored on a new device with their keychain item, export
# and import (an .xcappdata package, a whole-home tar, holes kept), an iOS device backup
# exported encrypted, read back and restored on another device, the lifecycle (a template
# clone, reset, offload and reinstall, a detached launch with ps/terminate/logs, openurl,
# simctl), and the refusals.
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
      *[[:space:]\;\>\<\|\&\$\'\"\*\?\[]*) line+=" '${arg//\'/\'\\\'\'}'" ;;
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
# Prints and runs a backup, showing its summary line, and prints the snapshot id on stdout.
# (Not `tee /dev/stderr`: when stderr is a file, that reopens it at offset 0 and overwrites it.)
capture() {
  show appbox "$@" >&2
  local out
  out=$("$APPBOX" "$@")
  printf '%s\n' "$out" >&2
  sed -n 's/^.*: snapshot \([0-9a-f]*\) .*$/\1/p' <<<"$out"
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

section "Run inside the sandbox: the home is writable, the rest of the device does not exist there"
step run com.example.notes -- /bin/sh -c 'echo "written by the app" > Documents/hi.txt; cat Documents/hi.txt; ls "$HOME"'
refused run com.example.notes -- /bin/sh -c 'cat ../../registry.db'
refused run com.example.notes -- /bin/sh -c 'echo evil >> Notes.app/Notes'
refused run com.example.notes -- /bin/sh -c "ls $APPBOX_ROOT/ApplicationRoot/$("$APPBOX" path com.example.journal | xargs basename)/Documents"
step launch com.example.notes

section "Sandbox v2: a bubblewrap jail, the app's own uid, Landlock and seccomp inside"
# The app's own user (as root: a host uid of its own, which owns its data, while the bundle
# stays root's: unmapped in the jail, root shows as 65534), and its home as the jail shows it.
step run com.example.notes -- /bin/sh -c 'id; echo "HOME=$HOME"; ls -ldn Documents Notes.app'
printf '%s$ cd %s && ls -ldn Documents Notes.app   # on the host%s\n' "$dim" "$NOTES_HOME" "$reset"
(cd "$NOTES_HOME" && ls -ldn Documents Notes.app)
refused run com.example.notes -- cat /etc/shadow
# No controlling terminal (/dev/tty), and TIOCSTI on stdin refused by seccomp (EPERM) before
# the terminal is even asked.
refused run com.example.notes -- perl -e 'open(my $t, "+<", "/dev/tty") or die "open /dev/tty: $!\n"'
refused run com.example.notes -- perl -e 'my $c = "x"; ioctl(STDIN, 0x5412, $c) or die "TIOCSTI: $!\n"'
# What the app writes never executes, not even through the dynamic loader.
refused run com.example.notes -- /bin/sh -c 'cp /bin/true Documents/t && chmod +x Documents/t && /lib64/ld-linux-x86-64.so.2 Documents/t'
step run com.example.notes --network none -- /bin/sh -c 'cut -d: -f1 /proc/net/dev | tail -n +3'

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

section "The keychain inside the sandbox: each running app asks its own broker (SecItem over descriptor 3)"
# Notes stored a sync token at its first launch above, from inside its jail (stderr said so).
# Journal, of the same team, reads it through the team's group; Other is refused (-34018).
step launch com.example.journal
step launch org.other.app
# A shell script inside the sandbox: the descriptor, the command on PATH, add, read, list.
step run com.example.notes -- /bin/sh -c 'echo "APPBOX_SECITEM_FD=$APPBOX_SECITEM_FD $(command -v appbox-secitem)"
  printf %s "s3cret" | appbox-secitem add --service demo --account me --data-file - --label Demo
  appbox-secitem get --service demo --account me --return both --json
  appbox-secitem list'
refused run com.example.notes -- appbox-secitem add --service demo --account me --data again
refused run com.example.notes -- appbox-secitem get --service demo --account me --group ZZZZZ99999.org.other.app
# A C client (the tests' probe, as an app of the same team) sends the broker malformed, huge,
# truncated and misframed messages and junk through the door: each is refused, nothing stops it.
PROBE="$DEMO_FILES/Probe.app"
mkdir -p "$PROBE"
cp "$BIN_DIR/appbox-secitem-probe" "$PROBE/probe"
printf '%s\n' '<?xml version="1.0" encoding="UTF-8"?>' '<plist version="1.0"><dict>' \
  '<key>CFBundleIdentifier</key><string>com.example.probe</string>' \
  '<key>CFBundleExecutable</key><string>probe</string><key>CFBundleVersion</key><string>1.0</string>' \
  '</dict></plist>' > "$PROBE/Info.plist"
"$APPBOX" install "$PROBE" > /dev/null
step launch com.example.probe -- hostile
step keychain com.example.notes list

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
printf '%s(first, what it would change, and what it drops that no snapshot keeps; nothing is touched)%s\n' "$dim" "$reset"
step restore com.example.notes --snapshot "$FIRST" --dry-run
step restore com.example.notes --snapshot "$FIRST"
printf '%s$ ls -R Documents && cat Documents/Drafts/letter.txt && ls Library/Caches tmp%s\n' "$dim" "$reset"
(cd "$NOTES_HOME" && ls -R Documents && cat Documents/Drafts/letter.txt && ls Library/Caches tmp)
step check --read-data

section "Browse snapshots: ls, dump, find, a tag, a one-file restore, a plain copy and a mount"
# Every read is of what is stored: ls reads one folder's tree, dump one file's content, find
# the trees; a snapshot id may be a unique prefix (4+ hex digits) or `latest`.
step ls "$SECOND" Documents --long --recursive
step dump "$SECOND" Documents/Drafts/letter.txt
step find '*.txt' --app com.example.notes
capture backup com.example.notes --tag before-cleanup >/dev/null
step snapshots com.example.notes --tag before-cleanup
printf '%s(one file back from the second snapshot; the rest of the home is left as it is)%s\n' "$dim" "$reset"
printf 'kept as it is\n' > "$NOTES_HOME/Documents/untouched.txt"
step restore com.example.notes --snapshot "${SECOND:0:5}" --include Documents/Drafts/letter.txt
show cat Documents/Drafts/letter.txt Documents/untouched.txt
cat "$NOTES_HOME/Documents/Drafts/letter.txt" "$NOTES_HOME/Documents/untouched.txt"
rm "$NOTES_HOME/Documents/untouched.txt"
step restore com.example.notes --snapshot "$FIRST" --target "$DEMO_FILES/first-copy"
printf '%s$ find first-copy -type f | sort%s\n' "$dim" "$reset"
(cd "$DEMO_FILES" && find first-copy -type f | sort)
if [ -e /dev/fuse ] && command -v fusermount3 >/dev/null; then
  MOUNT_DIR="$DEMO_FILES/snapshots"
  mkdir "$MOUNT_DIR"
  show appbox mount "$MOUNT_DIR" '&'
  "$APPBOX" mount "$MOUNT_DIR" &
  MOUNT_PID=$!
  for _ in $(seq 50); do [ -e "$MOUNT_DIR/com.example.notes/latest" ] && break; sleep 0.1; done
  printf '%s$ ls snapshots/com.example.notes && cat snapshots/com.example.notes/%s/Documents/Drafts/letter.txt%s\n' \
    "$dim" "$SECOND" "$reset"
  ls "$MOUNT_DIR/com.example.notes"
  cat "$MOUNT_DIR/com.example.notes/$SECOND/Documents/Drafts/letter.txt"
  printf '%s$ cmp snapshots/com.example.notes/%s/Documents/Drafts/letter.txt Documents/Drafts/letter.txt%s\n' \
    "$dim" "${SECOND:0:8}" "$reset"
  cmp "$MOUNT_DIR/com.example.notes/${SECOND:0:8}/Documents/Drafts/letter.txt" \
    "$NOTES_HOME/Documents/Drafts/letter.txt" && echo "identical"
  show fusermount3 -u snapshots
  fusermount3 -u "$MOUNT_DIR"
  wait "$MOUNT_PID"
else
  echo "(mount needs /dev/fuse and fusermount3; this machine has not got them, so that part is skipped)"
fi

section "A large file edited in place: only its changed chunks are stored"
# A file of 1 MiB or more is stored whole until a backup sees it change; then it is cut into
# content-defined chunks (about 512 KiB each), and each chunk the repository lacks is compared
# with the version an earlier archive holds: after a 64 KiB edit in the middle, even this first
# edit stores only the chunk around it, as a member .appbox/chunks/<digest> that any tar lists
# (the others are recorded where the earlier archive holds them); restore and export give
# whole files.
head -c 8388608 /dev/urandom > "$NOTES_HOME/Documents/recording.mov"
THIRD=$(capture backup com.example.notes)
echo "$THIRD"
printf '%s$ dd if=/dev/urandom of=Documents/recording.mov bs=64K seek=60 count=1 conv=notrunc%s\n' "$dim" "$reset"
dd if=/dev/urandom of="$NOTES_HOME/Documents/recording.mov" bs=64K seek=60 count=1 conv=notrunc status=none
FOURTH=$(capture backup com.example.notes)
echo "$FOURTH"
step snapshots com.example.notes
printf '%s$ tar --zstd -tvf Backups/archives/%s.tar.zst%s\n' "$dim" "$FOURTH" "$reset"
tar --zstd --warning=no-unknown-keyword -tvf "$APPBOX_ROOT/Backups/archives/$FOURTH.tar.zst"
RECORDING_SUM=$(sha256sum < "$NOTES_HOME/Documents/recording.mov")
rm "$NOTES_HOME/Documents/recording.mov"
step restore com.example.notes --snapshot "$FOURTH"
printf '%s$ sha256sum Documents/recording.mov  (the same as before the restore)%s\n' "$dim" "$reset"
[ "$(sha256sum < "$NOTES_HOME/Documents/recording.mov")" = "$RECORDING_SUM" ] && echo "identical"
rm "$NOTES_HOME/Documents/recording.mov"

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
printf '%s(and Notes 2.0 reads back, from inside, the sync token 1.0 stored at its first launch:)%s\n' "$dim" "$reset"
step launch com.example.notes

section "Revert to 1.0 and its data (the 2.0 data is snapshotted first)"
printf 'written by 2.0\n' > "$NOTES_HOME/Documents/from-2.0.txt"
step revert com.example.notes
step list

section "App groups: a container Notes and Journal (one team) share, which Other (another team) cannot see"
step list --groups
GROUP=$("$APPBOX" path com.example.notes group.com.example.shared)
step path com.example.journal group.com.example.shared
# Each app runs as its own uid; each sees the group's files as its own (an idmapped mount as root).
step run com.example.notes -- /bin/sh -c 'echo "$APPBOX_APP_GROUP_CONTAINERS"; G=${APPBOX_APP_GROUP_CONTAINERS#*=}; umask 077; echo "from Notes (uid $(id -u)), for Journal" > "$G/inbox.txt"; ls -ln "$G"'
step run com.example.journal -- /bin/sh -c 'G=${APPBOX_APP_GROUP_CONTAINERS#*=}; cat "$G/inbox.txt"; echo "read by Journal (uid $(id -u))" >> "$G/inbox.txt"; ls -ln "$G"'
printf '%s$ ls -ln %s   # on the host: the group'"'"'s own uid%s\n' "$dim" "$GROUP" "$reset"
ls -ln "$GROUP"
refused run org.other.app -- /bin/sh -c 'ls /var/mobile/Containers/Shared/AppGroup'
refused path org.other.app group.com.example.shared
step defaults com.example.notes write theme dark --suite group.com.example.shared
step defaults com.example.journal read --suite group.com.example.shared
refused defaults org.other.app read --suite group.com.example.shared
GROUP_SNAPSHOT=$(capture backup group.com.example.shared)
echo "$GROUP_SNAPSHOT"
printf 'overwritten\n' > "$GROUP/inbox.txt"
step restore group.com.example.shared --snapshot "$GROUP_SNAPSHOT"
show cat inbox.txt
cat "$GROUP/inbox.txt"
printf '%s(uninstalling one member keeps the container; a reinstalled member joins it again:)%s\n' "$dim" "$reset"
step uninstall com.example.journal
step list --groups
step install "$FIXTURES/Journal-1.0/Journal.app"
step path com.example.journal group.com.example.shared

section "File protection: a passcode, the kernel's per-file encryption, the lock and a prewarmed launch"
if [ "$(id -u)" != 0 ]; then
  echo "(file protection needs a file system with encryption; this part makes and mounts a small"
  echo " ext4 image for it, which needs root: skipped. Run 'sudo make demo' to see it.)"
else
  # In a subshell: its own device root on the image, unmounted however the block ends.
  (
    PROTECT_DIR=$(mktemp -d /tmp/appbox-demo-protect.XXXXXX)
    trap 'umount "$PROTECT_DIR/mnt" 2>/dev/null || umount -l "$PROTECT_DIR/mnt" 2>/dev/null; rm -rf "$PROTECT_DIR"' EXIT
    printf '%s$ truncate -s 64M image.ext4 && mkfs.ext4 -q -O encrypt image.ext4 && mount -o loop image.ext4 mnt%s\n' \
      "$dim" "$reset"
    truncate -s 64M "$PROTECT_DIR/image.ext4"
    mkfs.ext4 -q -O encrypt "$PROTECT_DIR/image.ext4"
    mkdir "$PROTECT_DIR/mnt"
    mount -o loop "$PROTECT_DIR/image.ext4" "$PROTECT_DIR/mnt"
    export APPBOX_ROOT="$PROTECT_DIR/mnt/device"
    step device init --name "Protected iPhone"
    step install "$FIXTURES/Vault-1.0/Vault.app"
    VAULT_HOME=$("$APPBOX" path com.example.vault)
    printf 'the combination is 12-34-56\n' > "$VAULT_HOME/Documents/vault.txt"
    printf 'a shopping list\n' > "$VAULT_HOME/Documents/list.txt"
    sync
    printf '2468\n' > "$PROTECT_DIR/passcode"
    printf '1111\n' > "$PROTECT_DIR/wrong"
    step device passcode set --passcode-file "$PROTECT_DIR/passcode"
    step protect com.example.vault Documents/vault.txt --class complete
    step protect com.example.vault Documents
    sync
    printf "%s$ grep -c 'combination is' image.ext4; grep -c 'shopping list' image.ext4%s\n" "$dim" "$reset"
    printf 'protected file on the raw disk: %s; unprotected file: %s\n' \
      "$(grep -c 'combination is' "$PROTECT_DIR/image.ext4" || true)" \
      "$(grep -c 'shopping list' "$PROTECT_DIR/image.ext4" || true)"
    step device lock
    step launch --prewarm com.example.vault
    refused files com.example.vault pull vault.txt "$PROTECT_DIR/pulled.txt"
    refused device unlock --passcode-file "$PROTECT_DIR/wrong"
    step device unlock --passcode-file "$PROTECT_DIR/passcode"
    step launch com.example.vault
  )
fi
section "Hostile homes: what an app plants cannot break appbox"
step run com.example.notes -- /bin/sh -c 'cd Documents && printf x > "$(printf "title\033]0;pwned\007")" && printf y > "$(printf "caf\351.txt")"'
printf '%s(names are shown escaped, never sent raw to the terminal, and typed back as shown:)%s\n' "$dim" "$reset"
step files com.example.notes ls
step files com.example.notes pull 'caf\xe9.txt'
printf '\n'
step run com.example.notes -- /bin/sh -c 'rm -rf Library/Preferences && ln -s ../Notes.app Library/Preferences'
refused defaults com.example.notes write evil 1
step run com.example.notes -- /usr/bin/perl -e 'chdir "Documents"; for $i (1..18) { $n = sprintf("%0250d", $i); mkdir $n; chdir $n } open F, ">deep.txt"; print F "4.5 KB below Documents\n"'
printf '%s(a tree deeper than PATH_MAX backs up, walked with descriptors; backups of different apps run at once:)%s\n' "$dim" "$reset"
printf '%s$ appbox backup com.example.notes & appbox backup com.example.journal & wait%s\n' "$dim" "$reset"
"$APPBOX" backup com.example.notes & first=$!
"$APPBOX" backup com.example.journal & second=$!
wait "$first" && wait "$second"
step check --read-data
section "A fleet: two devices back up to one S3 bucket (OpenStack Swift on loopback)"
CLUSTER="$DEMO_FILES/swift"
SPARE=$(mktemp -d /tmp/appbox-demo-spare.XXXXXX)
NEWDEVICE=$(mktemp -d /tmp/appbox-demo-new.XXXXXX)
trap 'bash "$HERE/scripts/swift-cluster.sh" stop "$CLUSTER" >/dev/null 2>&1 || true; rm -rf "$APPBOX_ROOT" "$DEMO_FILES" "$SPARE" "$NEWDEVICE"' EXIT
show scripts/swift-cluster.sh start swift
while IFS='=' read -r name value; do
  case $name in APPBOX_S3_ENDPOINT | AWS_ACCESS_KEY_ID | AWS_SECRET_ACCESS_KEY) export "$name=$value" ;; esac
done < <(bash "$HERE/scripts/swift-cluster.sh" start "$CLUSTER")
printf 'APPBOX_S3_ENDPOINT=%s AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=...\n' "$APPBOX_S3_ENDPOINT" "$AWS_ACCESS_KEY_ID"
FLEET=s3://demo-fleet/devices
step repo init --repo "$FLEET"
KIOSK_SNAPSHOT=$(capture backup com.example.notes --repo "$FLEET")
step --root "$SPARE" device init --name "Spare iPad"
printf '%s(the spare device has never had Notes: restore installs it from the kiosk'"'"'s snapshot)%s\n' "$dim" "$reset"
step --root "$SPARE" restore com.example.notes --snapshot "$KIOSK_SNAPSHOT" --repo "$FLEET"
step --root "$SPARE" run com.example.notes -- /bin/sh -c 'echo "written on the spare" > Documents/spare.txt'
printf '%s(its own backup stores only what the bucket lacks: the content is shared by the fleet)%s\n' "$dim" "$reset"
step --root "$SPARE" backup com.example.notes --repo "$FLEET"
step snapshots --repo "$FLEET"
step check --read-data --repo "$FLEET"
printf '%s(forget prunes under a lock object; what it drops is marked, and deleted an hour later)%s\n' "$dim" "$reset"
step forget com.example.notes --keep-last 1 --repo "$FLEET"
step repo show --repo "$FLEET"

section "Encrypted backups: every object sealed; keychain items follow to a new device"
printf 'a long fleet vault password\n' > "$DEMO_FILES/password"
VAULT=s3://demo-vault/notes
step repo init --repo "$VAULT" --encrypt --password-file "$DEMO_FILES/password"
VAULT_SNAPSHOT=$(capture backup com.example.notes --repo "$VAULT" --password-file "$DEMO_FILES/password")
LOCAL_VAULT="$DEMO_FILES/vault"
step repo init --repo "$LOCAL_VAULT" --encrypt --password-file "$DEMO_FILES/password"
step --quiet backup com.example.notes --repo "$LOCAL_VAULT" --password-file "$DEMO_FILES/password"
printf '%s(files of the encrypted repository that mention the app, its bundle or a path: none)%s\n' "$dim" "$reset"
show grep -rl -e com.example.notes -e Notes.app -e Documents/ vault '|' wc -l
{ grep -rl -e com.example.notes -e Notes.app -e Documents/ "$LOCAL_VAULT" || true; } | wc -l
refused snapshots --repo "$VAULT" --password-file "$DEMO_FILES/shared.txt"
printf '%s(a new device restores Notes, and with it the keychain item that is not this-device-only)%s\n' "$dim" "$reset"
step --root "$NEWDEVICE" device init --name "New iPhone"
printf '%s(Notes is not installed there: a restore names the snapshot it would install, then is given it)%s\n' "$dim" "$reset"
refused --root "$NEWDEVICE" restore com.example.notes --repo "$VAULT" --password-file "$DEMO_FILES/password"
step --root "$NEWDEVICE" restore com.example.notes --snapshot "$VAULT_SNAPSHOT" --repo "$VAULT" \
  --password-file "$DEMO_FILES/password"
step --root "$NEWDEVICE" keychain com.example.notes get --service sync --account ada
printf '\n'
printf '%s(the pax tar of the encrypted archive, framed zstd as stored, for GNU tar:)%s\n' "$dim" "$reset"
show appbox archive decrypt "$VAULT_SNAPSHOT" --repo "$VAULT" --password-file password '>' notes.tar.zst
"$APPBOX" archive decrypt "$VAULT_SNAPSHOT" --repo "$VAULT" --password-file "$DEMO_FILES/password" \
  >"$DEMO_FILES/notes.tar.zst"
show tar --zstd -tvf notes.tar.zst '|' sed -n 1,5p
tar --zstd --warning=no-unknown-keyword -tvf "$DEMO_FILES/notes.tar.zst" | sed -n 1,5p
section "Why and advise: each backup decision explained, and what makes backups big and slow"
JOURNAL_HOME=$("$APPBOX" path com.example.journal)
mkdir -p "$JOURNAL_HOME/Documents/Exports" "$JOURNAL_HOME/Documents/Thumbnails" "$JOURNAL_HOME/Documents/Offline" \
  "$JOURNAL_HOME/Library/Application Support"
printf 'Monday: started a journal.\n' > "$JOURNAL_HOME/Documents/journal.txt"
head -c 5000000 /dev/urandom > "$JOURNAL_HOME/Documents/Offline/maps.bin"
head -c 300000 /dev/urandom > "$JOURNAL_HOME/Library/Caches/thumbs.db"
step exclude com.example.journal Documents/Offline/maps.bin
printf '%s(six days of use, a backup after each: the app rewrites a 2 MB export and its index on every launch)%s\n' "$dim" "$reset"
for day in 1 2 3 4 5 6; do
  head -c 2000000 /dev/urandom > "$JOURNAL_HOME/Documents/Exports/timeline.json"
  head -c 40000 /dev/urandom > "$JOURNAL_HOME/Documents/Thumbnails/photo-$day.jpg"
  head -c $((700000 + day * 5000)) /dev/urandom > "$JOURNAL_HOME/Library/Application Support/index.sqlite.new"
  mv "$JOURNAL_HOME/Library/Application Support/index.sqlite.new" "$JOURNAL_HOME/Library/Application Support/index.sqlite"
  printf 'Day %d: wrote a little more.\n' "$day" >> "$JOURNAL_HOME/Documents/journal.txt"
  show appbox --quiet backup com.example.journal
  "$APPBOX" --quiet backup com.example.journal
done
printf 'Day 7: an entry after the last backup.\n' >> "$JOURNAL_HOME/Documents/journal.txt"
step why com.example.journal Documents/Offline/maps.bin
step why com.example.journal Library/Caches/thumbs.db
step why com.example.journal Documents/journal.txt
step advise com.example.journal --last 10 --html "$DEMO_FILES/advice.html"
step inspect com.example.journal
# The page is meant to be looked at: render it in a real browser and keep the picture.
# Written outside the checkout (a demo leaves the tree clean); APPBOX_DEMO_SCREENSHOT=Benchmarks/results/advise.png
# refreshes the one kept with the results.
SHOT="${APPBOX_DEMO_SCREENSHOT:-${TMPDIR:-/tmp}/appbox-demo-advise.png}"
if command -v chromium >/dev/null; then
  show chromium --headless --screenshot="$SHOT" "$DEMO_FILES/advice.html"
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --force-device-scale-factor=1 \
    --window-size=1120,2180 --screenshot="$SHOT" "file://$DEMO_FILES/advice.html" >/dev/null 2>&1
  printf '%s(the page, as Chromium renders it: %s)%s\n' "$dim" "$SHOT" "$reset"
else
  printf '%s(chromium is not installed: no screenshot of the page; make demo installs it)%s\n' "$dim" "$reset"
fi
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

section "iOS device backups: an encrypted export read back, and the app restored on another device"
# The format Finder, iTunes and idevicebackup2 write (docs/ios-backups.md). iOS's keybag asks
# every reader for 10,000,000 PBKDF2 rounds (12 s here); the demo's asks for 10,000.
export APPBOX_DEVICE_BACKUP_ROUNDS=10000
rm -f "$NOTES_HOME/Documents/disk.img"
printf 'an iOS device backup\n' > "$NOTES_HOME/Documents/for-the-backup.txt"
printf 'demo backup password\n' > "$DEMO_FILES/backup-password"
chmod 600 "$DEMO_FILES/backup-password"
step export-backup com.example.notes "$DEMO_FILES/NotesBackup" --encrypt --password-file "$DEMO_FILES/backup-password"
show ls NotesBackup
(cd "$DEMO_FILES/NotesBackup" && ls | head -n 8 | tr '\n' ' ' && printf '...\n')
step import-backup "$DEMO_FILES/NotesBackup" --list --password-file "$DEMO_FILES/backup-password"
SECOND="$DEMO_FILES/second-device"
step --root "$SECOND" device init --name "Second iPhone"
# Notes is not installed there: its snapshot waits, and restore says which bundle to install.
step --root "$SECOND" import-backup "$DEMO_FILES/NotesBackup" --app com.example.notes --password-file "$DEMO_FILES/backup-password"
refused --root "$SECOND" restore com.example.notes
step --root "$SECOND" install "$FIXTURES/Notes-1.0/Notes.app"
step --root "$SECOND" restore com.example.notes
show cat Documents/for-the-backup.txt
cat "$("$APPBOX" --root "$SECOND" path com.example.notes documents)/for-the-backup.txt"
printf 'not the password\n' > "$DEMO_FILES/wrong-password"
chmod 600 "$DEMO_FILES/wrong-password"
refused --root "$SECOND" import-backup "$DEMO_FILES/NotesBackup" --all --password-file "$DEMO_FILES/wrong-password"
unset APPBOX_DEVICE_BACKUP_ROUNDS

section "The lifecycle: a CI template clone, reset, offload and reinstall, a background app, URL schemes, simctl"
# On a device of its own: a CI template with two apps.
MAIN_ROOT=$APPBOX_ROOT
export APPBOX_ROOT="$DEMO_FILES/template"
mkdir -p "$DEMO_FILES/Ticker"
cp -a "$FIXTURES/Notes-1.0/Notes.app" "$DEMO_FILES/Ticker/Ticker.app"
sed -i 's|<string>com.example.notes</string>|<string>com.example.ticker</string>|' "$DEMO_FILES/Ticker/Ticker.app/Info.plist"
perl -0pi -e 's|</dict>\s*</plist>|<key>CFBundleURLTypes</key><array><dict><key>CFBundleURLSchemes</key><array><string>ticker</string></array></dict></array></dict></plist>|' \
  "$DEMO_FILES/Ticker/Ticker.app/Info.plist"
sed -i 's|com.example.notes|com.example.ticker|' "$DEMO_FILES/Ticker/Ticker.app/archived-expanded-entitlements.xcent"
printf '#!/bin/sh\necho "Ticker started with: $*"\nwhile :; do echo "tick $(date +%%T)"; sleep 1; done\n' \
  > "$DEMO_FILES/Ticker/Ticker.app/Notes"
step device init --name "CI template"
step install "$FIXTURES/Notes-1.0/Notes.app"
step install "$DEMO_FILES/Ticker/Ticker.app"
step launch com.example.notes
printf '%s(a template for parallel CI jobs: each job gets a copy, the same device, made with reflinks where the file system has them)%s\n' "$dim" "$reset"
step device clone "$DEMO_FILES/job-1"
step --root "$DEMO_FILES/job-1" list
step reset com.example.notes
step inspect com.example.notes
step offload com.example.notes
step list
refused launch com.example.notes
step install "$FIXTURES/Notes-1.0/Notes.app"
printf '%s(a confined app in the background: ps lists it, logs shows its output, terminate stops its whole jail)%s\n' "$dim" "$reset"
step launch com.example.ticker --detach
step ps
sleep 2
step logs com.example.ticker
step terminate com.example.ticker
step openurl 'ticker://open?from=demo'
sleep 1
step logs com.example.ticker
step terminate com.example.ticker
refused openurl 'nobody://x'
printf '%s(scripts written for xcrun simctl:)%s\n' "$dim" "$reset"
step simctl get_app_container booted com.example.notes data
step simctl list devices
step simctl appinfo booted com.example.notes
export APPBOX_ROOT=$MAIN_ROOT

section "Refusals are one clear line with the spec's exit status"
refused install "$FIXTURES/Notes-2.0/Notes.app"
refused update com.example.notes "$FIXTURES/Journal-1.0/Journal.app"
refused revert com.example.notes
refused inspect com.example.missing

printf '\n%sDemo finished.%s\n' "$bold" "$reset"
