import AppboxCore
import AppboxS3
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// A repository in a bucket of the test run's Swift cluster (or a cluster of its own), and
/// the environment appbox needs to reach it.
struct Bucket {
  let cluster: SwiftCluster
  let name: String
  var url: String { "s3://\(name)/fleet" }
  /// The store's endpoint and keys; forget prunes at once unless told otherwise. The lock
  /// settle stays at its default (1 s): Swift stamps objects to the second, so a shorter
  /// settle lets two forgets that start within one second both see only their own lock.
  var environment: [String: String] {
    cluster.environment.merging(["APPBOX_PRUNE_GRACE": "0"]) { $1 }
  }

  init(cluster: SwiftCluster? = nil) throws {
    self.cluster = try cluster ?? SwiftCluster.shared()
    name = SwiftCluster.uniqueBucket("fleet")
  }
}

extension Device {
  /// Runs appbox against `bucket` (`--repo` is appended after the arguments).
  @discardableResult
  func s3(_ bucket: Bucket, _ arguments: String..., environment: [String: String] = [:], input: [UInt8] = [])
    throws -> ProcessResult
  {
    try appbox(
      arguments + ["--repo", bucket.url], root: root,
      environment: bucket.environment.merging(environment) { $1 },
      input: input)
  }

  /// `--json` output of a command against `bucket`, expecting success.
  func s3JSON(_ bucket: Bucket, _ arguments: String..., environment: [String: String] = [:]) throws -> Any {
    let result = try appbox(
      ["--json"] + arguments + ["--repo", bucket.url], root: root,
      environment: bucket.environment.merging(environment) { $1 })
    #expect(result.status == 0, "\(arguments): \(result.err)")
    return try JSONSerialization.jsonObject(with: Data(result.stdout))
  }

  /// Backs up `app` to `bucket`; the snapshot's JSON.
  func backup(to bucket: Bucket, app: String = "com.example.notes", environment: [String: String] = [:])
    throws
    -> [String: Any]
  {
    let array = try s3JSON(bucket, "backup", app, environment: environment) as? [[String: Any]]
    return array?.first ?? [:]
  }
}

/// Every object of the bucket, read through the S3 API.
func allObjects(_ bucket: Bucket) throws -> [(key: String, bytes: [UInt8])] {
  let client = try s3Client(bucket.cluster)
  return try client.list(bucket.name, prefix: "").map { ($0.key, try client.get(bucket.name, $0.key)) }
}

/// A client of the cluster (appbox's own small S3 client).
func s3Client(_ cluster: SwiftCluster) throws -> S3Client {
  try S3Client(
    S3Configuration(
      endpoint: cluster.endpoint,
      credentials: S3Credentials(accessKey: cluster.accessKey, secretKey: cluster.secretKey)))
}

/// Whether `needle` occurs in `haystack`.
func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
  guard !needle.isEmpty, haystack.count >= needle.count else { return false }
  let first = needle[0]
  var index = 0
  while index <= haystack.count - needle.count {
    if haystack[index] == first && haystack[index..<(index + needle.count)].elementsEqual(needle) {
      return true
    }
    index += 1
  }
  return false
}

/// Waits (up to `timeout` seconds) until process `pid` has stopped itself (SIGSTOP at a
/// pause point); false when it did not, or has exited.
func waitUntilStopped(_ pid: pid_t, timeout: Double = 60) -> Bool {
  for _ in 0..<Int(timeout * 100) {
    if let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
      let close = stat.lastIndex(of: ")"),
      stat[stat.index(close, offsetBy: 2)] == "T"
    {
      return true
    }
    usleep(10_000)
  }
  return false
}
