import Foundation
import Glibc

/// Deterministic fault injection for crash-safety and race tests: when the environment
/// variable APPBOX_CRASH_AT names a point, the process kills itself with SIGKILL on reaching
/// it, exactly as a power cut or OOM kill would stop it; when APPBOX_PAUSE_AT names it, the
/// process stops itself with SIGSTOP there, so a test can change the disk at exactly that
/// moment (as a racing app would) and then continue it with SIGCONT. Unset (always, outside
/// tests), a point costs one comparison.
public enum CrashPoint {
  private static let target: String? = ProcessInfo.processInfo.environment["APPBOX_CRASH_AT"]
  private static let pause: String? = ProcessInfo.processInfo.environment["APPBOX_PAUSE_AT"]

  /// Whether `name` is the crash or pause point this process was told to stop at.
  public static func isArmed(_ name: StaticString) -> Bool {
    target == name.description || pause == name.description
  }

  @inline(__always)
  public static func hit(_ name: StaticString) {
    if let target, target == name.description { kill(getpid(), SIGKILL) }
    // raise, not kill(getpid()): directed at this thread, the stop takes it before it runs
    // on (a process-directed stop may reach this thread only some instructions later).
    if let pause, pause == name.description { raise(SIGSTOP) }
  }
}
