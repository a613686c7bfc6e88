// AppboxBackup owns the device-facing engines over a repository (AppboxRepository): backup
// (scan, change detection, read, archive, trees, commit: Backup/), restore (plan, write,
// extract, swap, revert, partial restores: Restore/), export and import (.tar, .xcappdata,
// device backups: Portable/), and `why` and `advise` (Advisor/). It depends on AppboxCore,
// AppboxCrypto, AppboxArchive, AppboxRepository and AppboxContainer, and AppboxStore for one
// thing only: a device backup's Manifest.db (Portable/DeviceBackup). It must not import the C
// libraries directly, AppboxS3 nor AppboxKeychain: the repository reaches the object stores,
// and the CLI injects the keychain (`KeychainSnapshotting`; the device's side is the CLI's
// DeviceKeychainSnapshotter). Engines never print: they report typed events
// (AppboxRepository's Events.swift) to an injected observer.

import AppboxRepository

/// An error of the backup layer: snapshots, archives, homes, imports. The engines and the
/// repository they work on share one error type, so a repository failure passes through an
/// engine unchanged (its code, message and cause).
public typealias BackupError = RepositoryError
