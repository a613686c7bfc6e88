import AppboxTestSupport
import Foundation
import Glibc

/// Encrypted repositories and S3, on the generated home:
/// - encrypted against unencrypted, full and incremental backups into a local directory
///   (target: within 1.15x);
/// - backup and restore throughput (MB/s of backed-up data) to a local directory and to S3 on
///   loopback (a Swift cluster started for the run by scripts/swift-cluster.sh), beside
///   restic's local and S3 backends on the same cluster.
extension Bench {
  var passwordFile: String { work + "/password" }

  func encryption(_ home: String) throws -> [Scenario] {
    try "bench password\n".write(toFile: passwordFile, atomically: true, encoding: .utf8)
    let plain = work + "/enc-plain"
    let sealed = work + "/enc-sealed"
    try shell.run(
      "rm -rf \(plain) \(sealed) && \(ab) --quiet repo init --repo \(plain)"
        + " && \(ab) --quiet repo init --repo \(sealed) --encrypt --password-file \(passwordFile)"
    )
    // First snapshots hold the bundle (stored once per repository); the timed ones do not.
    try shell.run("\(ab) --quiet backup \(app) --repo \(plain)")
    try shell.run("\(ab) --quiet backup \(app) --repo \(sealed) --password-file \(passwordFile)")
    var full = Scenario(name: "encrypted full backup", reference: "appbox")
    var incremental = Scenario(name: "encrypted incremental backup after a 1% change", reference: "appbox")
    var fullRows: [String: [Sample]] = [:]
    var incrementalRows: [String: [Sample]] = [:]
    for run in 0..<runs {
      let steps: [(String, String)] = [
        ("appbox", "\(ab) --quiet backup \(app) --full --repo \(plain)"),
        (
          "appbox encrypted",
          "\(ab) --quiet backup \(app) --full --repo \(sealed) --password-file \(passwordFile)"
        ),
      ]
      for (tool, command) in rotated(steps, run: run) {
        fullRows[tool, default: []].append(try shell.time(command, memory: true))
      }
      _ = try mutate(home: home, percent: 1, seed: UInt64(300 + run))
      let changed: [(String, String)] = [
        ("appbox", "\(ab) --quiet backup \(app) --repo \(plain)"),
        ("appbox encrypted", "\(ab) --quiet backup \(app) --repo \(sealed) --password-file \(passwordFile)"),
      ]
      for (tool, command) in rotated(changed, run: run) {
        incrementalRows[tool, default: []].append(try shell.time(command, memory: true))
      }
      progress("encrypted backups run \(run + 1)/\(runs)")
    }
    full.rows = ["appbox", "appbox encrypted"].map { ($0, fullRows[$0] ?? []) }
    incremental.rows = ["appbox", "appbox encrypted"].map { ($0, incrementalRows[$0] ?? []) }
    full.targets = [("appbox encrypted", "appbox", 1.15)]
    incremental.targets = [("appbox encrypted", "appbox", 1.15)]
    let note =
      "encrypted: every archive, manifest and snapshot object sealed with AES-256-GCM in 64 KiB segments; "
      + "the key from scrypt (N=2^15), which each command pays once (about 0.1 s)"
    full.notes = [note]
    incremental.notes = [note]
    return [full, incremental]
  }

  /// Backup and restore throughput to a directory and to S3 on loopback, beside restic.
  func objectStore(_ home: String) throws -> Scenario {
    let cluster = work + "/swift"
    let script = FileManager.default.currentDirectoryPath + "/scripts/swift-cluster.sh"
    let settings = try shell.run("SWIFT_TLS=1 bash \(script) start \(cluster)")
    defer { _ = try? shell.run("bash \(script) stop \(cluster)", allowFailure: true) }
    var values: [String: String] = [:]
    for line in settings.split(separator: "\n") {
      if let equals = line.firstIndex(of: "=") {
        values[String(line[..<equals])] = String(line[line.index(after: equals)...])
      }
    }
    guard let endpoint = values["APPBOX_S3_ENDPOINT"], let key = values["AWS_ACCESS_KEY_ID"],
      let secret = values["AWS_SECRET_ACCESS_KEY"], let tls = values["APPBOX_S3_TLS_ENDPOINT"],
      let ca = values["SWIFT_TLS_CA"]
    else { throw GeneratorError("the Swift cluster gave no settings") }
    var s3 = shell
    s3.environment["APPBOX_S3_ENDPOINT"] = endpoint
    s3.environment["APPBOX_S3_CA_FILE"] = ca
    s3.environment["AWS_ACCESS_KEY_ID"] = key
    s3.environment["AWS_SECRET_ACCESS_KEY"] = secret
    let bytes =
      Double(
        try shell.run("du -sb --exclude=Bench.app --exclude=Caches --exclude=tmp \(home) | cut -f1")
          .trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
    var scenario = Scenario(
      name: "backup and restore throughput: a directory and S3 on loopback",
      reference: "appbox backup to a directory")
    var rows: [String: [Sample]] = [:]
    for run in 0..<runs {
      let bucket = "bench-\(run)"
      let local = "\(work)/tp-\(run)"
      let restic = "restic -q --cacert \(ca) -r s3:\(tls)/\(bucket)-restic"
      try s3.run(
        "\(ab) --quiet repo init --repo s3://\(bucket)-enc/r --encrypt --password-file \(passwordFile)"
          + " && \(ab) --quiet repo init --repo s3://\(bucket)/r"
          + " && \(ab) --quiet repo init --repo s3://\(bucket)-tls/r --endpoint \(tls)"
          + " && \(ab) --quiet repo init --repo \(local)"
          + " && restic -q -r \(local)-restic init && \(restic) init")
      let backups: [(String, String)] = [
        ("appbox backup to a directory", "\(ab) --quiet backup \(app) --repo \(local)"),
        ("appbox backup to S3", "\(ab) --quiet backup \(app) --repo s3://\(bucket)/r"),
        (
          "appbox backup to S3, encrypted",
          "\(ab) --quiet backup \(app) --repo s3://\(bucket)-enc/r --password-file \(passwordFile)"
        ),
        (
          "appbox backup to S3 over https",
          "\(ab) --quiet backup \(app) --repo s3://\(bucket)-tls/r --endpoint \(tls)"
        ),
        (
          "restic backup to a directory",
          "restic -q -r \(local)-restic backup \(resticExcludes(home)) \(home)"
        ),
        ("restic backup to S3 over https", "\(restic) backup \(resticExcludes(home)) \(home)"),
      ]
      for (tool, command) in rotated(backups, run: run) {
        rows[tool, default: []].append(try s3.time(command))
      }
      let target = "\(work)/tp-restore-\(run)"
      try s3.run(
        "mkdir -p \(target) && for d in dir s3 enc tls; do \(appbox) --quiet --root \(target)/$d install \(work)/Bench.app; done"
      )
      let restores: [(String, String)] = [
        (
          "appbox restore from a directory",
          "\(appbox) --quiet --root \(target)/dir restore \(app) --repo \(local)"
        ),
        (
          "appbox restore from S3",
          "\(appbox) --quiet --root \(target)/s3 restore \(app) --repo s3://\(bucket)/r"
        ),
        (
          "appbox restore from S3, encrypted",
          "\(appbox) --quiet --root \(target)/enc restore \(app) --repo s3://\(bucket)-enc/r --password-file \(passwordFile)"
        ),
        (
          "appbox restore from S3 over https",
          "\(appbox) --quiet --root \(target)/tls restore \(app) --repo s3://\(bucket)-tls/r --endpoint \(tls)"
        ),
        ("restic restore from S3 over https", "\(restic) restore latest --target \(target)/restic"),
      ]
      for (tool, command) in rotated(restores, run: run) {
        rows[tool, default: []].append(try s3.time(command))
      }
      // This run's local copies go now (about ten times the data in all), so the runs do not
      // add up on disk; the buckets stay until the cluster is stopped.
      try shell.run("rm -rf \(local) \(local)-restic \(target) && sync")
      progress("object store run \(run + 1)/\(runs)")
    }
    let order = [
      "appbox backup to a directory", "appbox backup to S3", "appbox backup to S3, encrypted",
      "appbox backup to S3 over https", "restic backup to a directory", "restic backup to S3 over https",
      "appbox restore from a directory", "appbox restore from S3", "appbox restore from S3, encrypted",
      "appbox restore from S3 over https", "restic restore from S3 over https",
    ]
    scenario.rows = order.map { ($0, rows[$0] ?? []) }
    scenario.notes =
      ["a first backup of each repository (everything stored), \(Int(bytes / 1e6)) MB of data; MB/s:"]
      + order.map { tool in
        let seconds = median((rows[tool] ?? []).map(\.seconds))
        return "\(tool): \(String(format: "%.0f", bytes / 1e6 / seconds)) MB/s"
      } + [
        "the cluster: OpenStack Swift with s3api on loopback, one replica, single-process servers, on this machine's 2 cores (the same cores appbox and restic use)",
        "restic over https: over plain http its S3 library signs uploads as aws-chunked streams, which s3api refuses (501); appbox signs each request's SHA-256 and works over both",
      ]
    return scenario
  }
}
