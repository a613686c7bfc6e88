# appbox — build, test and demo. `make demo` and `make test` work on a fresh Debian
# machine: each installs the missing system packages first.

SWIFT ?= swift
APT_PACKAGES := libarchive-dev libzstd-dev libsqlite3-dev libssl-dev pkg-config libarchive-tools tar bubblewrap \
  libseccomp-dev util-linux e2fsprogs python3 python3-venv gzip bzip2 xz-utils lzip lz4 zstd ncompress lzop lrzip \
  libcurl4-openssl-dev passt iproute2 strace libfuse3-dev fuse3 xfsprogs btrfs-progs time procps
# The object store the S3 tests, the demo and the benchmark run against: OpenStack Swift with its
# s3api middleware, started on loopback by scripts/swift-cluster.sh. Installed without
# recommends (74 packages, about 70 s and 53 MB installed here; with recommends it pulls 159, a desktop
# keyring among them).
S3_PACKAGES := swift-proxy swift-account swift-container swift-object curl
BENCH_PACKAGES := libarchive-tools restic time
# The demo renders `advise --html` in a real browser (a large package: not needed by make test).
DEMO_PACKAGES := chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps build release install install-files test test-deps test-faults test-retention test-advice-page demo demo-deps bench bench-large bench-huge bench-startup bench-secitem bench-clone bench-deps format lint clean

all: build

# Install the system packages (C libraries, and the tools the tests compare against)
# that are not installed yet.
deps:
	@missing=$$(for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing" $$missing; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi
	@# pasta (passt), the apps' own network, opens /dev/net/tun as the app's uid: udev makes it 0666
	@# on Debian; a machine without udev (a container) may have it 0600.
	@if [ -c /dev/net/tun ] && [ "$$(stat -c %a /dev/net/tun)" != 666 ]; then \
	  echo "make deps: chmod 0666 /dev/net/tun (as udev does), for pasta"; $(SUDO) chmod 0666 /dev/net/tun; \
	fi
	@missing=$$(for p in $(S3_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing" $$missing; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# Every import a target makes must be a dependency it declares (docs/architecture.md).
IMPORT_CHECK := --explicit-target-dependency-import-check error
build: deps
	$(SWIFT) build $(IMPORT_CHECK)

# Build output goes to stderr, so `make bench` prints only its Markdown report on stdout.
# The Swift runtime and Foundation are linked statically: every command starts in about half
# the time (no 20 shared libraries to load and relocate; see Benchmarks/results/HISTORY.md).
RELEASE_FLAGS := -c release --static-swift-stdlib
release: deps
	@$(SWIFT) build $(RELEASE_FLAGS) 1>&2

# Installs the release build's three executables side by side in $(DESTDIR)$(PREFIX)/bin:
# appbox finds appbox-sandbox and appbox-secitem in the directory of its own executable.
PREFIX ?= /usr/local
INSTALLED := appbox appbox-sandbox appbox-secitem
install: release
	@$(MAKE) --no-print-directory install-files BIN_DIR="$$($(SWIFT) build $(RELEASE_FLAGS) --show-bin-path)"

# The copy alone, from the products directory BIN_DIR (the README tour's test passes the debug build's).
install-files:
	@test -n "$(BIN_DIR)" || { echo "make install-files: set BIN_DIR to a products directory" >&2; exit 2; }
	install -d "$(DESTDIR)$(PREFIX)/bin"
	install -m 0755 $(addprefix $(BIN_DIR)/,$(INSTALLED)) "$(DESTDIR)$(PREFIX)/bin/"

# Builds everything (the appbox and appbox-sandbox executables too) and runs every test.
test: deps test-deps
	$(SWIFT) build --build-tests $(IMPORT_CHECK)
	SWIFT="$(SWIFT)" bash scripts/run-tests.sh

# What only the tests need: the independent readers of iOS device backups (pyiosbackup,
# iphone_backup_decrypt) from PyPI, in a virtualenv of their own under .build/.
test-deps: deps
	@bash scripts/device-backup-readers.sh >/dev/null

# The full fault sweep (docs/crash-safety.md): every writing command killed, and failed with EIO
# and with ENOSPC, at each of its fsync, fdatasync, rename, unlink and syncfs calls in turn (strace),
# each run verified (the next command, check --read-data, every snapshot restored on a new device).
# `make test` runs a few faults per command; this runs them all (about an hour here).
test-faults: deps
	$(SWIFT) build --build-tests
	APPBOX_FAULTS_FULL=1 $(SWIFT) test --skip-build --filter 'FaultSweepTests|CommandFaultTests|DataSafetyTests'

# forget's retention policy against restic itself: the same snapshot times in a restic repository
# and `restic forget --dry-run` for each policy (about a minute: every restic command runs scrypt).
test-retention: bench-deps
	$(SWIFT) build --build-tests
	APPBOX_RESTIC_COMPARE=1 $(SWIFT) test --skip-build --filter RetentionPolicyTests

# The advice page as Chromium lays it out 390 px wide (docs/why-and-advise.md); needs chromium.
test-advice-page: demo-deps
	$(SWIFT) build --build-tests
	APPBOX_TEST_CHROMIUM=1 $(SWIFT) test --skip-build --filter AdvicePageTests

# The main job end to end on a throwaway device root.
demo: release demo-deps
	@bash scripts/demo.sh "$$($(SWIFT) build $(RELEASE_FLAGS) --show-bin-path)"

demo-deps: deps
	@missing=$$(for p in $(DEMO_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "make demo: installing" $$missing; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi

bench-deps: deps
	@for tool in bsdtar restic /usr/bin/time; do command -v $$tool >/dev/null || missing=1; done; \
	if [ -n "$$missing" ]; then \
	  echo "make bench: installing $(BENCH_PACKAGES)"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(BENCH_PACKAGES) >/dev/null; \
	fi

bench: release bench-deps
	@bash Benchmarks/run.sh small "$$($(SWIFT) build $(RELEASE_FLAGS) --show-bin-path)"
	@bash Benchmarks/startup.sh "$$($(SWIFT) build $(RELEASE_FLAGS) --show-bin-path)"
	@bash Benchmarks/secitem.sh "$$($(SWIFT) build $(RELEASE_FLAGS) --show-bin-path)"
	@bash Benchmarks/clone.sh "$$($(SWIFT) build $(RELEASE_FLAGS) --show-bin-path)"

# device clone of 10 apps and 100,000 files beside cp -a (WORK=DIR: on another file system).
bench-clone: release
	@bash Benchmarks/clone.sh "$$($(SWIFT) build $(RELEASE_FLAGS) --show-bin-path)"

# The keychain from inside the sandbox: broker round trips beside the host command's per-call cost.
bench-secitem: release
	@bash Benchmarks/secitem.sh "$$($(SWIFT) build $(RELEASE_FLAGS) --show-bin-path)"

# What starting a confined app costs, beside bare bwrap and unshare + Landlock.
bench-startup: release
	@bash Benchmarks/startup.sh "$$($(SWIFT) build $(RELEASE_FLAGS) --show-bin-path)"

bench-large: release bench-deps
	@bash Benchmarks/run.sh large "$$($(SWIFT) build $(RELEASE_FLAGS) --show-bin-path)"

# A million small files (750,011 backed up): peak memory and time, beside GNU tar and restic on
# the same tree in the same 3 runs, of a full, a no-change and a 1% incremental backup, a restore
# into an empty home, check, diff of two snapshots, find, ls --recursive and advise; targets:
# appbox's peak RSS <= 150 MB in each (about 35 minutes here; 20 GB of disk at the peak).
bench-huge: release bench-deps
	@bash Benchmarks/run.sh huge "$$($(SWIFT) build $(RELEASE_FLAGS) --show-bin-path)"

format:
	$(SWIFT) format -i -r Sources Tests Package.swift

lint:
	$(SWIFT) format lint -r Sources Tests Package.swift

clean:
	rm -rf .build
