/// A file's data protection class: when it can be read.
///
/// Ordered from weakest to strongest: a file's class may be raised, never lowered.
public enum ProtectionClass: String, Sendable, CaseIterable, Comparable {
  /// Always readable; not encrypted (NSFileProtectionNone).
  case none
  /// From the first unlock after a (simulated) restart until the next restart
  /// (NSFileProtectionCompleteUntilFirstUserAuthentication).
  case untilFirstUnlock = "until-first-unlock"
  /// Files open when the device locks stay usable; new opens fail
  /// (NSFileProtectionCompleteUnlessOpen).
  case completeUnlessOpen = "complete-unless-open"
  /// Only while the device is unlocked (NSFileProtectionComplete).
  case complete

  /// The classes that have a key (every class but `none`), strongest first.
  public static let keyed: [ProtectionClass] = [.complete, .completeUnlessOpen, .untilFirstUnlock]

  private var rank: Int { Self.allCases.firstIndex(of: self)! }

  public static func < (a: ProtectionClass, b: ProtectionClass) -> Bool { a.rank < b.rank }

  /// The platform's name for it.
  public var platformName: String {
    switch self {
    case .none: return "NSFileProtectionNone"
    case .untilFirstUnlock: return "NSFileProtectionCompleteUntilFirstUserAuthentication"
    case .completeUnlessOpen: return "NSFileProtectionCompleteUnlessOpen"
    case .complete: return "NSFileProtectionComplete"
    }
  }

  /// Whether the device's `lock` drops this class's key (a reboot drops every key).
  public var isDroppedAtLock: Bool { self == .complete || self == .completeUnlessOpen }
}

/// The pax record (an extended attribute record, `SCHILY.xattr.<name>`) in which archives keep
/// a protected file's class; restore re-applies the class instead of setting an attribute.
/// A real attribute of that name on a file is not the app's to set: backups ignore it.
public let protectionClassAttribute = "user.appbox.protection-class"
