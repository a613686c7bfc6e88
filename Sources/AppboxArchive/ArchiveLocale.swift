// Why every libarchive call that touches a name runs with a UTF-8 LC_CTYPE on the calling thread.
//
// libarchive treats `archive_entry_pathname` strings as being in the current locale's charset and
// converts them to UTF-8 for pax `path`/`linkpath` records (and back when reading). A Swift process
// starts in the "C" locale, whose charset is ASCII, so every non-ASCII name fails that conversion;
// the pax writer then falls back to writing the raw bytes with `hdrcharset=BINARY`, which GNU tar
// 1.34 does not know ("Ignoring unknown extended header keyword 'hdrcharset'").
//
// With a UTF-8 LC_CTYPE, valid UTF-8 names are written as ordinary UTF-8 pax records (silent in GNU
// tar) and names that are not valid UTF-8 still fall back to raw bytes plus `hdrcharset=BINARY`, so
// every name round-trips byte for byte. `setlocale` would do this process-wide and behind the back
// of every other module; `uselocale(3)` changes only the calling thread, so each call below switches
// to "C.UTF-8" and back. Nobody has to configure anything at start-up. libarchive caches the
// charset name per archive object on first use, which is always inside such a scope.
//
// The reader does not depend on this for correctness: libarchive 3.6.2 keeps the raw bytes of a pax
// path it cannot convert (and reports ARCHIVE_WARN, which the reader tolerates). It uses the same
// scope so that names convert without warnings.

#if canImport(Glibc)
  import Glibc
#endif

enum UTF8CharacterType {
  /// A `locale_t` with LC_CTYPE "C.UTF-8", or nil if the system has no such locale (then the thread's
  /// own locale stays in effect and non-ASCII names are stored with `hdrcharset=BINARY`).
  /// Never freed: one per process.
  nonisolated(unsafe) private static let locale: locale_t? = {
    for name in ["C.UTF-8", "C.utf8", "en_US.UTF-8"] {
      if let made = newlocale(Int32(1 << LC_CTYPE), name, nil) { return made }
    }
    return nil
  }()

  /// Whether a UTF-8 locale was found; tests use it to decide what GNU tar should print.
  static var isAvailable: Bool { locale != nil }

  /// Runs `body` with LC_CTYPE = C.UTF-8 on this thread, then restores the thread's locale.
  ///
  /// `body` must not suspend (it is synchronous), so it stays on this thread. Uses `uselocale(3)`.
  static func perform<T>(_ body: () throws -> T) rethrows -> T {
    guard let locale else { return try body() }
    let previous = uselocale(locale)
    defer { uselocale(previous) }
    return try body()
  }
}
