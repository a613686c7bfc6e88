// A time as appbox prints it everywhere: UTC to the second in ISO 8601 (`2026-12-04T03:31:32Z`,
// what `ISO8601DateFormatter` gives with its default options), made with `gmtime_r(3)` and no
// formatter object. A formatter costs tens of microseconds to make, and listings (`find` over
// a hundred snapshots, `ls --recursive`) print a time on every row.

import Foundation
import Glibc

/// `date` in UTC to the whole second below it (after rounding to the millisecond, as the
/// formatter does), as `YYYY-MM-DDTHH:MM:SSZ`. Uses `gmtime_r(3)`.
public func utcTimestamp(_ date: Date) -> String {
  // As the formatter does: to the nearest millisecond first, then the whole second below.
  let milliseconds = (date.timeIntervalSince1970 * 1000).rounded()
  var seconds = time_t(floor(milliseconds / 1000))
  var parts = tm()
  guard gmtime_r(&seconds, &parts) != nil else { return ISO8601DateFormatter().string(from: date) }
  func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : String(value) }
  let year = Int(parts.tm_year) + 1900
  let yearText =
    year >= 1000 ? String(year) : String(repeating: "0", count: 4 - String(year).count) + String(year)
  return
    "\(yearText)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z"
}
