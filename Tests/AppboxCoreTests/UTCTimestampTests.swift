import AppboxCore
import Foundation
import Testing

/// `utcTimestamp` writes what `ISO8601DateFormatter` writes, without making one per call.
struct UTCTimestampTests {
  @Test func agreesWithTheFoundationFormatter() {
    let formatter = ISO8601DateFormatter()
    formatter.timeZone = TimeZone(identifier: "UTC")
    var random = SystemRandomNumberGenerator()
    var dates: [Date] = [
      Date(timeIntervalSince1970: 0), Date(timeIntervalSince1970: 0.999),
      Date(timeIntervalSince1970: 1_764_818_492),
      Date(timeIntervalSince1970: 1_764_818_492.5), Date(timeIntervalSince1970: 951_782_400),  // 2000-02-29
      Date(timeIntervalSince1970: 4_102_444_799),  // 2099-12-31T23:59:59Z
      Date(timeIntervalSince1970: 1_764_818_492.9999),  // rounds up to the next second
    ]
    for _ in 0..<2000 {
      dates.append(Date(timeIntervalSince1970: Double.random(in: 0..<4_102_444_800, using: &random)))
    }
    for date in dates {
      #expect(utcTimestamp(date) == formatter.string(from: date), "\(date.timeIntervalSince1970)")
    }
  }

  @Test func beforeTheEpochRoundsDown() {
    #expect(utcTimestamp(Date(timeIntervalSince1970: -0.5)) == "1969-12-31T23:59:59Z")
    #expect(utcTimestamp(Date(timeIntervalSince1970: -86_400)) == "1969-12-31T00:00:00Z")
  }
}
