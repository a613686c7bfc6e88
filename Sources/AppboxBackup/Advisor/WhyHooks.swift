// The facts `why` reports that other parts of appbox provide, each behind one small function,
// so the work that makes them real plugs in here without touching the rest of `why`:
// - file protection: a file's data-protection class;
// - unreadable entries: what a backup does with an entry it cannot read, and whether a
//   snapshot recorded one as unreadable.

import AppboxCore

/// The data-protection class of the open file or directory `file` ("complete",
/// "complete-unless-open", "until-first-unlock", "none"), where protection exists on this
/// device. appbox has no file protection yet, so nothing has a class: always nil. File
/// protection answers here (from the file's encryption policy, say) and `why` reports it.
func protectionClass(of file: FileDescriptor, status: FileStatus) -> String? { nil }

/// What the next backup does with an entry it cannot read (`reason`: the errno's text).
/// Today a backup stops at the first entry it cannot read, with an error. When snapshots
/// record unreadable entries and are marked incomplete instead, this sentence says so.
func unreadableConsequence(_ reason: String) -> String {
  "the next backup cannot read it (\(reason)) and stops there with an error"
}

/// Whether `snapshot` recorded `path` as unreadable (taken while it could not be read).
/// Snapshots do not record unreadable entries yet (a backup reads everything or fails), so
/// never; when they do, the snapshot's list of unreadable paths is consulted here.
func wasUnreadable(_ path: [UInt8], in snapshot: Snapshot) -> Bool { false }
