import AppboxCrypto
import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// restic's retention policy: documented cases, and the same decisions as restic itself.
struct RetentionPolicyTests {
  static func snapshot(_ index: Int, _ time: String, tag: String? = nil) -> Snapshot {
    let formatter = ISO8601DateFormatter()
    return Snapshot(
      id: String(format: "%08x", index), app: "com.a", device: "D", containerID: "C", version: "1",
      bundleDirectoryName: "Notes.app", seal: "", time: formatter.date(from: time)!, kind: .full, tag: tag,
      parent: nil, rootTree: SHA256.hash([UInt8(index & 0xFF)]), files: 0, bytes: 0, bytesAdded: 0,
      archive: "a", keychainOffset: nil, warnings: 0)
  }

  /// Times spread over two years: several a day, gaps of days, weeks and months.
  static let times: [String] = {
    var times: [String] = []
    let base = ISO8601DateFormatter().date(from: "2022-11-28T08:00:00Z")!
    var offset: TimeInterval = 0
    var seed: UInt64 = 7
    for _ in 0..<44 {
      seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
      // From 20 minutes to about 40 days apart.
      let steps: [TimeInterval] = [1200, 3000, 7200, 30000, 86400, 200_000, 700_000, 3_500_000]
      offset += steps[Int(seed >> 61)]
      let formatter = ISO8601DateFormatter()
      times.append(formatter.string(from: base.addingTimeInterval(offset)))
    }
    return times
  }()

  static let snapshots = times.enumerated().map { snapshot($0, $1, tag: $0 % 11 == 3 ? "keepme" : nil) }

  func kept(_ policy: RetentionPolicy) -> Set<String> {
    Set(
      policy.apply(to: Self.snapshots).filter(\.keep).map {
        ISO8601DateFormatter().string(from: $0.snapshot.time)
      })
  }

  @Test func eachRuleKeepsTheNewestSnapshotOfItsLastPeriods() throws {
    let list = [
      Self.snapshot(0, "2024-01-01T10:00:00Z"), Self.snapshot(1, "2024-01-01T18:00:00Z"),
      Self.snapshot(2, "2024-01-02T09:00:00Z"), Self.snapshot(3, "2024-01-09T09:00:00Z", tag: "pre-update"),
      Self.snapshot(4, "2024-02-10T09:00:00Z"), Self.snapshot(5, "2024-02-10T09:30:00Z"),
    ]
    func ids(_ policy: RetentionPolicy) -> [String] {
      policy.apply(to: list).filter(\.keep).map(\.snapshot.id)
    }
    #expect(ids(RetentionPolicy(last: 2)) == ["00000005", "00000004"])
    // The newest of each day: 02-10 (09:30), 01-09, 01-02.
    #expect(ids(RetentionPolicy(daily: 3)) == ["00000005", "00000003", "00000002"])
    #expect(ids(RetentionPolicy(monthly: 2)) == ["00000005", "00000003"])
    #expect(ids(RetentionPolicy(tags: ["pre-update"])) == ["00000003"])
    // Within 32 days of the newest snapshot (02-10 09:30), not of now.
    #expect(
      ids(RetentionPolicy(within: RetentionDuration(parsing: "33d"))) == ["00000005", "00000004", "00000003"])
    let reasons = RetentionPolicy(last: 1, daily: 1).apply(to: list).first?.reasons
    #expect(reasons == ["last snapshot", "daily snapshot"])
    #expect(
      RetentionDuration(parsing: "1y5m7d2h") == RetentionDuration(years: 1, months: 5, days: 7, hours: 2))
    #expect(RetentionDuration(parsing: "7") == nil && RetentionDuration(parsing: "3w") == nil)
  }

  /// The same times in a restic repository (one snapshot each, `--time`), the same policies,
  /// and `restic forget --dry-run --json`: the kept times must be the same. About a minute (each
  /// restic command derives its key with scrypt): opt-in, `make test-retention`
  /// (APPBOX_RESTIC_COMPARE=1, with restic on the machine).
  @Test(
    .enabled(
      if: ProcessInfo.processInfo.environment["APPBOX_RESTIC_COMPARE"] == "1"
        && FileManager.default.isExecutableFile(atPath: "/usr/bin/restic")))
  func theDecisionsAreResticsOwn() throws {
    let dir = TemporaryDirectory("restic")
    let environment = [
      "RESTIC_PASSWORD": "pw", "RESTIC_REPOSITORY": dir.url("repo"), "TZ": "UTC", "HOME": dir.path,
    ]
    let data = dir.url("data")
    try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
    try "x".write(toFile: data + "/f", atomically: true, encoding: .utf8)
    let initialized = try runProcess("/usr/bin/restic", ["init", "-q"], environment: environment)
    try #require(initialized.status == 0, "\(initialized.err)")
    for (index, time) in Self.times.enumerated() {
      let stamp = String(time.dropLast()).replacingOccurrences(of: "T", with: " ")
      var arguments = ["backup", "-q", "--time", stamp, "--host", "h", data]
      if index % 11 == 3 { arguments += ["--tag", "keepme"] }
      let made = try runProcess("/usr/bin/restic", arguments, environment: environment)
      try #require(made.status == 0, "\(made.err)")
    }
    let policies: [(RetentionPolicy, [String])] = [
      (RetentionPolicy(last: 5), ["--keep-last", "5"]),
      (RetentionPolicy(hourly: 6), ["--keep-hourly", "6"]),
      (RetentionPolicy(daily: 7), ["--keep-daily", "7"]),
      (RetentionPolicy(weekly: 5), ["--keep-weekly", "5"]),
      (RetentionPolicy(monthly: 6), ["--keep-monthly", "6"]),
      (RetentionPolicy(yearly: 3), ["--keep-yearly", "3"]),
      (RetentionPolicy(within: RetentionDuration(parsing: "2m10d")), ["--keep-within", "2m10d"]),
      (RetentionPolicy(tags: ["keepme"]), ["--keep-tag", "keepme"]),
      (
        RetentionPolicy(last: 2, daily: 4, weekly: 3, monthly: 4, yearly: 2),
        [
          "--keep-last", "2", "--keep-daily", "4", "--keep-weekly", "3", "--keep-monthly", "4",
          "--keep-yearly", "2",
        ]
      ),
      (
        RetentionPolicy(hourly: 3, within: RetentionDuration(parsing: "20d"), tags: ["keepme"]),
        ["--keep-hourly", "3", "--keep-within", "20d", "--keep-tag", "keepme"]
      ),
    ]
    for (policy, flags) in policies {
      let result = try runProcess(
        "/usr/bin/restic", ["forget", "--dry-run", "--json", "--group-by", ""] + flags,
        environment: environment)
      try #require(result.status == 0, "\(flags): \(result.err)")
      let groups = try #require(
        try JSONSerialization.jsonObject(with: Data(result.out.utf8)) as? [[String: Any]])
      let resticTimes = (groups.first?["keep"] as? [[String: Any]] ?? []).compactMap { $0["time"] as? String }
      let formatter = ISO8601DateFormatter()
      let resticKept = Set(
        resticTimes.compactMap { text -> String? in
          // restic prints RFC 3339 with a zone ("2023-01-02T03:04:05Z" or "+00:00").
          let trimmed = text.replacingOccurrences(of: "+00:00", with: "Z")
          return formatter.date(from: trimmed).map { formatter.string(from: $0) }
        })
      #expect(resticKept.count == resticTimes.count, "\(flags): unparsed times \(resticTimes.prefix(3))")
      #expect(kept(policy) == resticKept, "\(flags)")
    }
  }
}
