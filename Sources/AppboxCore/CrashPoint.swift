import Foundation
import Glibc

/// Deterministic fault injection for crash-safety tests: when the environment variable
/// APPBOX_CRASH_AT names a point, the process kills itself with SIGKILL on reaching it,
/// exactly as a power cut or OOM kill would stop it. Unset (always, outside tests), a
/// point costs one comparison.
public enum CrashPoint {
  private static let target: String? = ProcessInfo.processInfo.environment["APPBOX_CRASH_AT"]

  @inline(__always)
  public static func hit(_ name: StaticString) {
    guard let target else { return }
    if target == name.description { kill(getpid(), SIGKILL) }
  }
}
