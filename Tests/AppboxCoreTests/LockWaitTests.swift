import AppboxCore
import Testing

/// The one lock-wait value: what `--wait` and `$APPBOX_LOCK_TIMEOUT` parse into. Nothing a
/// user can type may trap when it is turned into a timeout.
struct LockWaitTests {
  @Test func secondsParseToADuration() throws {
    #expect(try #require(LockWait.parse("5")).duration == .seconds(5))
    #expect(try #require(LockWait.parse("0.25")).duration == .milliseconds(250))
    #expect(try #require(LockWait.parse("0")).duration == .zero)
  }

  @Test(arguments: ["nan", "-1", "-0.5", "", "soon", " 5", "5s", "-inf"])
  func whatIsNoNumberOfSecondsIsRefused(_ text: String) {
    #expect(LockWait.parse(text) == nil, "\(text)")
  }

  @Test(arguments: ["inf", "1e300", "1e19", "99999999999999999999"])
  func endlessAndHugeWaitsAreCappedToAYear(_ text: String) throws {
    let wait = try #require(LockWait.parse(text), "\(text)")
    #expect(wait.duration == .seconds(Int64(LockWait.maximumSeconds)))
    // What callers do with it must not trap either.
    #expect(wait.atLeast(.seconds(5)) == wait.duration)
    _ = wait.duration.components
  }

  @Test func noWaitGivenIsNoneExceptForShortLocks() {
    #expect(LockWait.none.duration == .zero)
    #expect(LockWait.none.atLeast(.seconds(5)) == .seconds(5))
    #expect(LockWait.none.or(.seconds(5)) == .seconds(5))
    let given = LockWait(seconds: 0)!
    #expect(given.or(.seconds(5)) == .zero)
    #expect(given.atLeast(.seconds(5)) == .seconds(5))
    #expect(LockWait(seconds: 60)!.atLeast(.seconds(5)) == .seconds(60))
  }
}
