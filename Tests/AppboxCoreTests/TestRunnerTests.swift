import AppboxCore
@testable import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// The test support's own process starters. A CI run once hung until its time ran out: a
/// pipe another test thread had open without close-on-exec (Foundation's `Pipe`) was
/// inherited by a long-lived child, so that test never saw its pipe's end.
struct TestRunnerTests {
  /// The descriptors a started child has open, but the one `ls` opens to list them.
  private func descriptorsOfAChild() throws -> Set<String> {
    let result = try runProcess("/bin/sh", ["-c", "exec ls /proc/self/fd"])
    #expect(result.status == 0, "\(result.err)")
    return Set(result.out.split(separator: "\n").map(String.init))
  }

  @Test func aChildInheritsOnlyItsStandardDescriptors() throws {
    var ends: [Int32] = [0, 0]
    try #require(pipe(&ends) == 0)  // not close-on-exec, as Foundation's Pipe
    defer { for fd in ends { close(fd) } }
    let open = try descriptorsOfAChild()
    #expect(!open.contains(String(ends[0])) && !open.contains(String(ends[1])))
    // 0, 1 and 2, and the directory ls reads.
    #expect(open.count == 4, "\(open.sorted())")
  }

  @Test func aStartedProcessReportsHowItEnded() throws {
    let exits = try startProcess("/bin/sh", ["-c", "exit 3"])
    exits.waitUntilExit()
    #expect(!exits.isRunning)
    #expect(exits.terminationReason == .exit && exits.terminationStatus == 3)

    let sleeper = try startProcess("/bin/sleep", ["30"])
    #expect(sleeper.isRunning)
    sleeper.terminate()
    sleeper.waitUntilExit()
    #expect(sleeper.terminationReason == .uncaughtSignal && sleeper.terminationStatus == SIGTERM)
  }

  @Test func aStartedProcessCanStartWithSignalsBlocked() throws {
    // grep itself, as a shell may change its mask at start.
    let result = try startProcess(
      "/bin/grep", ["-q", "^SigBlk:.*4000$", "/proc/self/status"], blocking: [SIGTERM])
    result.waitUntilExit()
    #expect(result.terminationStatus == 0, "SIGTERM (bit 15, 0x4000) is not blocked in the child")
  }

  /// A CI run saw a child die of SIGPIPE while the test read its output: the reading end was
  /// gone, closed by another thread's stale `close` of a reused number. The test's end of the
  /// child's stdout is kept at a high number, out of that reuse.
  @Test func theOutputIsReadFromAHighDescriptor() throws {
    // The child finds which of its parent's (this process's) descriptors is its stdout's pipe.
    let script = """
      me=$(readlink /proc/$$/fd/1)
      for f in /proc/$PPID/fd/*; do if [ "$(readlink "$f")" = "$me" ]; then echo "${f##*/}"; fi; done
      """
    let result = try runProcess("/bin/sh", ["-c", script])
    #expect(result.status == 0, "\(result.err)")
    let numbers = result.out.split(separator: "\n").compactMap { Int32($0) }
    #expect(numbers.count == 1 && numbers.allSatisfy { $0 >= 700 }, "\(result.out) \(result.err)")
  }

  /// A read error ends the drain as an error, not as the output's end.
  @Test func aReadErrorIsReportedNotTakenForTheEnd() throws {
    var ends: [Int32] = [0, 0]
    try #require(pipe(&ends) == 0)
    let number = ends[0]
    close(ends[1])
    close(number)
    let drained = drain(number)
    #expect(drained.failure == .badDescriptor && drained.bytes.isEmpty)
  }
}
