import AppboxCore
import Foundation
import Glibc

/// A real OpenStack Swift cluster with the S3 API on loopback (`scripts/swift-cluster.sh`),
/// for the tests that need an object store. One cluster serves the whole test run (each test
/// uses buckets of its own); it is stopped when the test process exits, and by the script's
/// watcher if the process dies. Nothing is mocked: a cluster that cannot start makes every
/// test that asks for it fail with the script's reason, never skip.
public final class SwiftCluster: Sendable {
  public let directory: String
  public let endpoint: String
  public let accessKey: String
  public let secretKey: String

  /// The environment appbox reads the store from.
  public var environment: [String: String] {
    ["APPBOX_S3_ENDPOINT": endpoint, "AWS_ACCESS_KEY_ID": accessKey, "AWS_SECRET_ACCESS_KEY": secretKey]
  }

  /// The run's shared cluster, started on first use.
  public static func shared() throws -> SwiftCluster {
    switch sharedCluster {
    case .success(let cluster): return cluster
    case .failure(let error): throw error
    }
  }

  private static let sharedCluster: Result<SwiftCluster, Error> = {
    let directory = TemporaryDirectory("swift")
    // Kept for the whole run; the directory object is released only with the process.
    keptDirectories.append(directory)
    let result = Result { try SwiftCluster.start(in: directory.path) }
    if case .success(let cluster) = result {
      sharedDirectory = cluster.directory
      atexit(stopSharedCluster)
    }
    return result
  }()

  /// Starts a cluster of its own in `directory` (a test that stops its store needs one).
  public static func start(in directory: String, replicas: Int = 1) throws -> SwiftCluster {
    let script = repositoryRoot + "/scripts/swift-cluster.sh"
    var environment = ProcessInfo.processInfo.environment
    environment["APPBOX_CLUSTER_OWNER"] = String(getpid())
    let result = try runProcess(
      "/bin/bash", [script, "start", directory, String(replicas)], environment: environment)
    guard result.status == 0 else {
      throw SystemError(
        "start a Swift cluster (scripts/swift-cluster.sh exited \(result.status)): "
          + result.err.trimmingCharacters(in: .whitespacesAndNewlines), path: directory)
    }
    var values: [String: String] = [:]
    for line in result.out.split(separator: "\n") {
      guard let equals = line.firstIndex(of: "=") else { continue }
      values[String(line[..<equals])] = String(line[line.index(after: equals)...])
    }
    guard let endpoint = values["APPBOX_S3_ENDPOINT"], let key = values["AWS_ACCESS_KEY_ID"],
      let secret = values["AWS_SECRET_ACCESS_KEY"]
    else { throw SystemError("read the Swift cluster's settings", path: directory) }
    return SwiftCluster(directory: directory, endpoint: endpoint, accessKey: key, secretKey: secret)
  }

  init(directory: String, endpoint: String, accessKey: String, secretKey: String) {
    self.directory = directory
    self.endpoint = endpoint
    self.accessKey = accessKey
    self.secretKey = secretKey
  }

  /// Runs the script's `command` (stop, stop-proxy, start-proxy) on this cluster.
  @discardableResult
  public func control(_ command: String) throws -> ProcessResult {
    try runProcess("/bin/bash", [repositoryRoot + "/scripts/swift-cluster.sh", command, directory])
  }

  /// A bucket name no other test uses (the bucket itself is created by whoever needs it).
  public static func uniqueBucket(_ label: String = "t") -> String {
    "\(label)-\(String(UInt64.random(in: 0...UInt64.max), radix: 16))"
  }
}

nonisolated(unsafe) private var keptDirectories: [TemporaryDirectory] = []
nonisolated(unsafe) private var sharedDirectory: String?

private func stopSharedCluster() {
  guard let directory = sharedDirectory else { return }
  _ = try? runProcess("/bin/bash", [repositoryRoot + "/scripts/swift-cluster.sh", "stop", directory])
  try? FileTree.remove(atPath: directory)
}
