// Which snapshots a retention policy keeps: restic's `forget --keep-*` rules, as restic 0.14
// (the version this project benchmarks against, and tests against) applies them.
//
// Algorithm (restic's `ApplyPolicy`): take the snapshots newest first, in commit order (the
// catalog's order, which decides "latest" everywhere in appbox because clocks can step back;
// restic sorts by time, the same order unless a clock stepped back). Walk them in that order;
// each snapshot is kept when
// - it carries one of the `keepTags` ("has tag T"), or
// - `keepWithin` is set and its time is after the latest snapshot time minus that duration
//   (counted from the newest snapshot, not from now: a repository nobody backs up for a year
//   keeps its history), or
// - for any of last/hourly/daily/weekly/monthly/yearly with a count left, its bucket (the
//   snapshot itself; the hour, day, ISO week, month or year it was taken in, in UTC) differs
//   from the bucket of the last snapshot that rule kept: the rule keeps it and its count goes
//   down by one. So each rule keeps the newest snapshot of each of its N most recent periods
//   that have snapshots.
// Everything else is removed. Each kept snapshot carries every reason that kept it, the way
// `restic forget --dry-run` prints them.
// Invariants: a pure function of the snapshots' times, tags and order; a policy with no rule
// is refused (it would remove everything), so some snapshot is always kept when there is one.

import Foundation

/// restic's `--keep-within` duration: years, months, days and hours ("1y5m7d2h").
public struct RetentionDuration: Sendable, Equatable, CustomStringConvertible {
  public var years = 0
  public var months = 0
  public var days = 0
  public var hours = 0

  public init(years: Int = 0, months: Int = 0, days: Int = 0, hours: Int = 0) {
    self.years = years
    self.months = months
    self.days = days
    self.hours = hours
  }

  /// Parses "1y5m7d2h" (any of the parts, in any order, each a number and a unit); nil when
  /// malformed or zero.
  public init?(parsing text: String) {
    var number = ""
    var seen = false
    for character in text {
      if character.isASCII && character.isNumber {
        number.append(character)
        continue
      }
      guard let value = Int(number) else { return nil }
      number = ""
      switch character {
      case "y": years += value
      case "m": months += value
      case "d": days += value
      case "h": hours += value
      default: return nil
      }
      seen = true
    }
    guard number.isEmpty, seen, years + months + days + hours > 0 else { return nil }
  }

  public var description: String {
    var text = ""
    if years > 0 { text += "\(years)y" }
    if months > 0 { text += "\(months)m" }
    if days > 0 { text += "\(days)d" }
    if hours > 0 { text += "\(hours)h" }
    return text
  }

  /// `date` minus this duration, calendar-wise in UTC (as Go's `AddDate` then `Add`).
  func subtracted(from date: Date) -> Date {
    var calendar = Calendar(identifier: .gregorian)
    calendar.timeZone = TimeZone(identifier: "UTC")!
    var parts = calendar.dateComponents(
      [.year, .month, .day, .hour, .minute, .second, .nanosecond], from: date)
    parts.year = (parts.year ?? 0) - years
    parts.month = (parts.month ?? 0) - months
    parts.day = (parts.day ?? 0) - days
    let shifted = calendar.date(from: parts) ?? date
    return shifted.addingTimeInterval(-Double(hours) * 3600)
  }
}

/// A retention policy: restic's `--keep-*` options.
public struct RetentionPolicy: Sendable, Equatable {
  public var last = 0
  public var hourly = 0
  public var daily = 0
  public var weekly = 0
  public var monthly = 0
  public var yearly = 0
  public var within: RetentionDuration?
  public var tags: [String] = []

  public init(
    last: Int = 0, hourly: Int = 0, daily: Int = 0, weekly: Int = 0, monthly: Int = 0, yearly: Int = 0,
    within: RetentionDuration? = nil, tags: [String] = []
  ) {
    self.last = last
    self.hourly = hourly
    self.daily = daily
    self.weekly = weekly
    self.monthly = monthly
    self.yearly = yearly
    self.within = within
    self.tags = tags
  }

  /// Whether no rule is set (such a policy would keep nothing).
  public var isEmpty: Bool {
    last == 0 && hourly == 0 && daily == 0 && weekly == 0 && monthly == 0 && yearly == 0 && within == nil
      && tags.isEmpty
  }
}

/// One snapshot's fate under a policy.
public struct RetentionDecision: Sendable, Equatable {
  public var snapshot: Snapshot
  public var keep: Bool
  /// Why it is kept ("last snapshot", "daily snapshot", "within 7d", "has tag T"); empty when removed.
  public var reasons: [String]
}

extension RetentionPolicy {
  /// The decision for each of `snapshots` (given in commit order, oldest first), newest first.
  public func apply(to snapshots: [Snapshot]) -> [RetentionDecision] {
    let ordered = Array(snapshots.reversed())
    guard let latest = snapshots.map(\.time).max() else { return [] }
    var calendar = Calendar(identifier: .gregorian)
    calendar.timeZone = TimeZone(identifier: "UTC")!
    var iso = Calendar(identifier: .iso8601)
    iso.timeZone = TimeZone(identifier: "UTC")!
    typealias Bucket = (count: Int, reason: String, key: (Date, Int) -> Int)
    var buckets: [Bucket] = [
      (last, "last snapshot", { _, index in index }),
      (
        hourly, "hourly snapshot",
        { date, _ in
          let c = calendar.dateComponents([.year, .month, .day, .hour], from: date)
          return c.year! * 1_000_000 + c.month! * 10_000 + c.day! * 100 + c.hour!
        }
      ),
      (
        daily, "daily snapshot",
        { date, _ in
          let c = calendar.dateComponents([.year, .month, .day], from: date)
          return c.year! * 10_000 + c.month! * 100 + c.day!
        }
      ),
      (
        weekly, "weekly snapshot",
        { date, _ in
          let c = iso.dateComponents([.yearForWeekOfYear, .weekOfYear], from: date)
          return c.yearForWeekOfYear! * 100 + c.weekOfYear!
        }
      ),
      (
        monthly, "monthly snapshot",
        { date, _ in
          let c = calendar.dateComponents([.year, .month], from: date)
          return c.year! * 100 + c.month!
        }
      ),
      (yearly, "yearly snapshot", { date, _ in calendar.component(.year, from: date) }),
    ]
    var lastKey = [Int](repeating: -1, count: buckets.count)
    let cutoff = within.map { $0.subtracted(from: latest) }
    var decisions: [RetentionDecision] = []
    for (index, snapshot) in ordered.enumerated() {
      var reasons: [String] = []
      if let tag = snapshot.tag, tags.contains(tag) { reasons.append("has tag \(tag)") }
      if let cutoff, let within, snapshot.time > cutoff { reasons.append("within \(within)") }
      for number in buckets.indices where buckets[number].count > 0 {
        let key = buckets[number].key(snapshot.time, index)
        if key != lastKey[number] {
          lastKey[number] = key
          buckets[number].count -= 1
          reasons.append(buckets[number].reason)
        }
      }
      decisions.append(RetentionDecision(snapshot: snapshot, keep: !reasons.isEmpty, reasons: reasons))
    }
    return decisions
  }
}
