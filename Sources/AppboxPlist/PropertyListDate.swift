// ISO 8601 dates as property lists write them: `2024-01-02T03:04:05Z`, always UTC.
//
// Converted by hand with proleptic Gregorian day arithmetic (days since 1970-01-01) rather
// than through a formatter, so that parsing is strict, never depends on locale or time
// zone, and no input-derived value reaches a trapping conversion.

import Foundation

enum PropertyListDate {
  /// 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z, in seconds since 1970.
  static let earliest: Int64 = -62_135_596_800
  static let latest: Int64 = 253_402_300_799

  /// Parses `YYYY-MM-DDTHH:MM:SS[.fraction]Z`; nil when anything is off.
  static func parse(_ text: String) -> Date? {
    let chars = Array(text.utf8)
    guard chars.count >= 20 else { return nil }
    func number(_ start: Int, _ length: Int) -> Int? {
      var value = 0
      for index in start..<start + length {
        let digit = Int(chars[index]) - 0x30
        guard (0...9).contains(digit) else { return nil }
        value = value * 10 + digit
      }
      return value
    }
    let separators: [(Int, UInt8)] = [(4, 0x2D), (7, 0x2D), (10, 0x54), (13, 0x3A), (16, 0x3A)]
    for (index, expected) in separators where chars[index] != expected { return nil }
    guard let year = number(0, 4), let month = number(5, 2), let day = number(8, 2),
      let hour = number(11, 2), let minute = number(14, 2), let second = number(17, 2),
      year >= 1, (1...12).contains(month), (1...daysIn(month: month, year: year)).contains(day),
      hour < 24, minute < 60, second < 60
    else { return nil }
    var fraction = 0.0
    var index = 19
    if chars[index] == 0x2E {
      index += 1
      var scale = 0.1
      let start = index
      while index < chars.count, (0x30...0x39).contains(chars[index]) {
        fraction += Double(chars[index] - 0x30) * scale
        scale /= 10
        index += 1
      }
      guard index > start else { return nil }
    }
    guard index == chars.count - 1, chars[index] == 0x5A else { return nil }
    let days = daysSinceEpoch(year: year, month: month, day: day)
    let seconds = days * 86_400 + Int64(hour * 3600 + minute * 60 + second)
    return Date(timeIntervalSince1970: Double(seconds) + fraction)
  }

  /// Formats to whole seconds (rounding down), clamped to years 1 through 9999.
  static func format(_ date: Date) -> String {
    let interval = date.timeIntervalSince1970
    var seconds: Int64
    if interval.isNaN {
      seconds = 0
    } else if interval <= Double(earliest) {
      seconds = earliest
    } else if interval >= Double(latest) {
      seconds = latest
    } else {
      seconds = Int64(interval.rounded(.down))
    }
    let days = floorDivide(seconds, 86_400)
    seconds -= days * 86_400
    let (year, month, day) = civil(fromDaysSinceEpoch: days)
    func pad(_ value: Int64, _ width: Int) -> String {
      let digits = String(value)
      return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }
    return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(seconds / 3600, 2)):"
      + "\(pad(seconds / 60 % 60, 2)):\(pad(seconds % 60, 2))Z"
  }

  private static func daysIn(month: Int, year: Int) -> Int {
    switch month {
    case 2: return year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
    case 4, 6, 9, 11: return 30
    default: return 31
    }
  }

  private static func floorDivide(_ value: Int64, _ divisor: Int64) -> Int64 {
    let quotient = value / divisor
    return value % divisor < 0 ? quotient - 1 : quotient
  }

  /// Days from 1970-01-01 to the given date, counting in 400-year eras that start on March 1
  /// so that the leap day falls at the end of each year.
  private static func daysSinceEpoch(year: Int, month: Int, day: Int) -> Int64 {
    let shiftedYear = Int64(month <= 2 ? year - 1 : year)
    let era = floorDivide(shiftedYear, 400)
    let yearOfEra = shiftedYear - era * 400
    let monthFromMarch = Int64((month + 9) % 12)
    let dayOfYear = (153 * monthFromMarch + 2) / 5 + Int64(day) - 1
    let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
    return era * 146_097 + dayOfEra - 719_468
  }

  /// The inverse of `daysSinceEpoch`.
  private static func civil(fromDaysSinceEpoch days: Int64) -> (Int64, Int64, Int64) {
    let shifted = days + 719_468
    let era = floorDivide(shifted, 146_097)
    let dayOfEra = shifted - era * 146_097
    let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
    let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
    let monthFromMarch = (5 * dayOfYear + 2) / 153
    let day = dayOfYear - (153 * monthFromMarch + 2) / 5 + 1
    let month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9
    let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
    return (year, month, day)
  }
}
