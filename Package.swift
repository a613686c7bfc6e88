// swift-tools-version:6.0
// appbox: iOS-style sandboxed app containers on Linux.
// Targets are listed in dependency order; every dependency points down this list.
import PackageDescription

let package = Package(
  name: "appbox",
  products: [
    .executable(name: "appbox", targets: ["appbox"]),
    .executable(name: "appbox-sandbox", targets: ["appbox-sandbox"]),
    .executable(name: "appbox-secitem", targets: ["appbox-secitem"]),
    .library(
      name: "AppboxKit",
      targets: [
        "AppboxCore", "AppboxPlist", "AppboxKeychain", "AppboxRepository", "AppboxContainer", "AppboxBackup",
      ]),
    // For Swift apps inside the sandbox: the SecItem-like keychain client.
    .library(name: "AppboxSecItem", targets: ["AppboxSecItem"]),
    // For the tests: preloaded into appbox, it finds double closes and sees exit handlers
    // (Tests/PreloadProbes).
    .library(name: "appbox-preload-probes", type: .dynamic, targets: ["PreloadProbes"]),
  ],
  targets: [
    // C libraries, one door each: only the module named in the comment imports it.
    .systemLibrary(  // imported by AppboxArchive
      name: "CArchive", pkgConfig: "libarchive", providers: [.apt(["libarchive-dev"])]),
    .systemLibrary(  // imported by AppboxArchive: the framed zstd archives below libarchive
      name: "CZstd", pkgConfig: "libzstd", providers: [.apt(["libzstd-dev"])]),
    .systemLibrary(  // imported by AppboxStore
      name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
    .systemLibrary(  // imported by AppboxCrypto
      name: "COpenSSL", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
    .systemLibrary(  // imported by AppboxS3; headers only: libcurl is loaded when S3 needs it
      name: "CCurl", providers: [.apt(["libcurl4-openssl-dev"])]),
    .systemLibrary(  // imported by AppboxMount: the read-only FUSE view of a repository
      name: "CFuse", pkgConfig: "fuse3", providers: [.apt(["libfuse3-dev"])]),
    .systemLibrary(  // used by appbox-sandbox (C) only: the seccomp filter
      name: "CSeccomp", pkgConfig: "libseccomp", providers: [.apt(["libseccomp-dev"])]),
    // Syscalls Swift cannot call directly (openat2, renameat2, xattrs, Landlock probe).
    .target(name: "CSystem"),
    // The confinement helper: plain C, so it runs without the Swift runtime (inside the jail).
    .executableTarget(
      name: "appbox-sandbox", dependencies: ["CSeccomp"],
      linkerSettings: [
        .unsafeFlags(["-static-executable", "-Xlinker", "--gc-sections"])
      ]),

    // The in-app keychain client in C (library and header) and the command built on it,
    // static like the helper: both run inside the jail.
    .target(name: "CSecItem"),
    .executableTarget(
      name: "appbox-secitem", dependencies: ["CSecItem"],
      linkerSettings: [
        .unsafeFlags(["-static-executable", "-Xlinker", "--gc-sections"])
      ]),

    // Errno, descriptors, contained paths, xattrs, locks.
    .target(name: "AppboxCore", dependencies: ["CSystem"]),
    // The property-list codec (XML and binary, keyed archives), hardened against hostile
    // input. Imports AppboxCore only (for its failure protocol): no C modules, no storage.
    .target(name: "AppboxPlist", dependencies: ["AppboxCore"]),
    // How pipeline threads meet: monitor, joinable thread, bounded hand-off queue, buffer pool,
    // cancellation token. Imports no appbox module (AppboxCore at most): no storage, engines,
    // crypto or C library modules.
    .target(name: "AppboxPipeline"),
    // SQLite connection, statements, transactions, migrations.
    .target(name: "AppboxStore", dependencies: ["AppboxCore", "CSQLite"]),
    // SHA-256, AES-256-GCM, random bytes over libcrypto.
    .target(name: "AppboxCrypto", dependencies: ["AppboxCore", "COpenSSL"]),
    // pax tar reading and writing over libarchive; framed zstd archives over libzstd.
    .target(name: "AppboxArchive", dependencies: ["AppboxCore", "AppboxPipeline", "CArchive", "CZstd"]),
    // A small S3 client (SigV4, streaming multipart uploads, ranged reads) over libcurl.
    .target(name: "AppboxS3", dependencies: ["AppboxCore", "AppboxCrypto", "AppboxPipeline", "CCurl"]),
    // The device-bound encrypted item store: access groups, device key, backup hooks.
    .target(name: "AppboxKeychain", dependencies: ["AppboxCore", "AppboxStore", "AppboxCrypto"]),
    // The in-app keychain protocol and a SecItem-like client for Swift apps.
    .target(name: "AppboxSecItem", dependencies: ["AppboxCore", "AppboxPlist", "CSystem"]),
    // The keychain broker a running app talks to: requests to keychain calls, the server.
    .target(
      name: "AppboxSecItemBroker",
      dependencies: ["AppboxCore", "AppboxPlist", "AppboxKeychain", "AppboxSecItem", "CSystem"]),
    // Backup repositories: object stores (local, S3), keys, locks, sync, the catalog, the tree
    // and manifest formats, check, forget, diff, browsing. Knows nothing of devices.
    .target(
      name: "AppboxRepository",
      dependencies: [
        "AppboxCore", "AppboxPlist", "AppboxStore", "AppboxCrypto", "AppboxArchive", "AppboxS3",
        "AppboxPipeline",
      ]),
    // Device root, registry, bundles, seals, homes, install, sandbox.
    .target(
      name: "AppboxContainer",
      dependencies: [
        "AppboxCore", "AppboxPlist", "AppboxStore", "AppboxCrypto", "AppboxKeychain", "AppboxSecItem",
        "AppboxSecItemBroker",
      ]),
    // The device-facing engines over a repository: backup, restore, export and import (tar,
    // .xcappdata, device backups), the advisor. Store only for a device backup's Manifest.db.
    .target(
      name: "AppboxBackup",
      dependencies: [
        "AppboxCore", "AppboxPlist", "AppboxStore", "AppboxCrypto", "AppboxArchive", "AppboxRepository",
        "AppboxContainer", "AppboxPipeline",
      ]),
    // The snapshots as a read-only FUSE file system (libfuse3).
    .target(
      name: "AppboxMount", dependencies: ["AppboxCore", "AppboxCrypto", "AppboxRepository", "CFuse"]),
    // Command-line parsing, the commands, text and JSON output.
    .target(
      name: "AppboxCLI",
      dependencies: [
        "AppboxCore", "AppboxPlist", "AppboxStore", "AppboxCrypto", "AppboxKeychain", "AppboxRepository",
        "AppboxContainer", "AppboxBackup", "AppboxMount",
      ]),
    // The executable: a few lines that hand over to AppboxCLI.
    .executableTarget(name: "appbox", dependencies: ["AppboxCLI"]),

    // A hostile app for the sandbox tests (plain C, like the helper, so it runs in the jail).
    .executableTarget(
      name: "appbox-hostile", path: "Tests/HostileApp",
      linkerSettings: [
        .unsafeFlags(["-static-stdlib", "-Xlinker", "--gc-sections", "-Xlinker", "--as-needed"])
      ]),

    // A keychain client for the broker tests and benchmark (plain C, static: runs in the jail).
    .executableTarget(
      name: "appbox-secitem-probe", dependencies: ["CSecItem"], path: "Tests/SecItemProbe",
      linkerSettings: [
        .unsafeFlags(["-static-executable", "-Xlinker", "--gc-sections"])
      ]),

    // Probes preloaded into appbox by the tests: double closes, exit handlers.
    .target(name: "PreloadProbes", path: "Tests/PreloadProbes"),

    // Helpers shared by the tests and the benchmark: temp directories, fixtures, running programs.
    .target(name: "AppboxTestSupport", dependencies: ["AppboxCore", "AppboxPlist", "CSystem"]),
    // The benchmark: a seeded home generator and the side-by-side runner (`make bench`).
    .executableTarget(
      name: "appbox-bench", dependencies: ["AppboxArchive", "AppboxTestSupport"],
      path: "Benchmarks/Sources/appbox-bench"),

    .testTarget(name: "AppboxCoreTests", dependencies: ["AppboxCore", "AppboxTestSupport"]),
    .testTarget(name: "AppboxPlistTests", dependencies: ["AppboxPlist", "AppboxTestSupport"]),
    .testTarget(name: "AppboxPipelineTests", dependencies: ["AppboxPipeline", "AppboxTestSupport"]),
    .testTarget(name: "AppboxStoreTests", dependencies: ["AppboxStore", "AppboxTestSupport"]),
    .testTarget(name: "AppboxCryptoTests", dependencies: ["AppboxCrypto", "AppboxTestSupport"]),
    .testTarget(name: "AppboxS3Tests", dependencies: ["AppboxS3", "AppboxCrypto", "AppboxTestSupport"]),
    .testTarget(name: "AppboxArchiveTests", dependencies: ["AppboxArchive", "AppboxTestSupport"]),
    .testTarget(name: "AppboxKeychainTests", dependencies: ["AppboxKeychain", "AppboxTestSupport"]),
    .testTarget(
      name: "AppboxSecItemTests",
      dependencies: [
        "AppboxSecItem", "AppboxSecItemBroker", "AppboxKeychain", "AppboxPlist", "CSecItem",
        "AppboxTestSupport",
      ]),
    .testTarget(
      name: "AppboxContainerTests", dependencies: ["AppboxContainer", "AppboxPlist", "AppboxTestSupport"]),
    .testTarget(
      name: "AppboxBackupTests",
      dependencies: [
        "AppboxBackup", "AppboxRepository", "AppboxArchive", "AppboxContainer", "AppboxCrypto", "AppboxStore",
        "AppboxPipeline", "AppboxPlist",
        // The advice page (AppboxCLI's AdviceHTML.swift) is tested on the advisor's fixtures.
        "AppboxCLI", "AppboxTestSupport",
      ]),
    .testTarget(name: "AppboxCLITests", dependencies: ["AppboxCLI", "AppboxTestSupport"]),
    .testTarget(
      name: "EndToEndTests",
      dependencies: [
        "AppboxCore", "AppboxArchive", "AppboxBackup", "AppboxRepository", "AppboxCrypto", "AppboxPlist",
        "AppboxS3",
        "AppboxTestSupport",
      ]),
  ]
)
