// How long to wait for a lock another appbox holds: the one value the command line's `--wait`
// (else `$APPBOX_LOCK_TIMEOUT`) gives, parsed once at the CLI's edge and passed down to every
// lock that waits (device root, apps, running apps, repositories, the prune lock).
//
// Invariants: a LockWait is always a finite, non-negative duration no longer than `maximum`,
// so no caller can trap converting it (Duration, milliseconds, a Date): `parse` refuses what
// is not a number of seconds (nan, negative, empty) and caps what is longer than a year,
// `inf` included ("wait for ever" in effect). Not given at all, a wait is `nil` in `given`:
// most locks then fail busy at once (exit 75), and the few that are only ever held for
// short work (the root lock, the repository-wide lock, the prune lock, a running lock)
// wait a few seconds regardless (`atLeast`, `or`).

/// The lock wait the user asked for, if any.
public struct LockWait: Sendable, Equatable, CustomStringConvertible {
  /// The longest wait: a year (longer values and `inf` are capped to it).
  public static let maximumSeconds: Double = 86_400 * 365
  /// No wait asked for: busy at once.
  public static let none = LockWait(given: nil)

  /// What the user gave (`--wait`, `$APPBOX_LOCK_TIMEOUT`), nil when nothing.
  public let given: Duration?

  private init(given: Duration?) { self.given = given }

  /// A wait of `seconds`, capped to `maximumSeconds`; nil for nan or a negative number.
  public init?(seconds: Double) {
    guard !seconds.isNaN, seconds >= 0 else { return nil }
    let capped = min(seconds, LockWait.maximumSeconds)
    given = .milliseconds(Int64((capped * 1000).rounded(.up)))
  }

  /// Parses a number of seconds (`5`, `0.5`, `inf`); nil for anything else, nan or negative.
  public static func parse(_ text: String) -> LockWait? {
    guard let seconds = Double(text) else { return nil }
    return LockWait(seconds: seconds)
  }

  /// How long to wait for a lock whose holders may hold it long: what was given, else 0.
  public var duration: Duration { given ?? .zero }

  /// How long to wait for a lock only ever held for short work: what was given, but at least
  /// `minimum`.
  public func atLeast(_ minimum: Duration) -> Duration { max(minimum, duration) }

  /// What was given, else `fallback`.
  public func or(_ fallback: Duration) -> Duration { given ?? fallback }

  public var description: String {
    guard let given else { return "none" }
    let (seconds, attoseconds) = given.components
    return attoseconds == 0 ? "\(seconds)s" : "\(Double(seconds) + Double(attoseconds) / 1e18)s"
  }
}
