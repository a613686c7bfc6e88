// A detached launch's log: the app's stdout and stderr, kept to a bounded size outside its home.
//
// The app writes into a pipe (both streams into one, in the order written); a thread of the
// launch's owner (the supervisor, an appbox process) reads it and appends to
// `.appbox/logs/<CONTAINER-ID>/<LAUNCH-ID>.log`. When the file would grow past `limit`
// bytes it is renamed to `<LAUNCH-ID>.log.1` (replacing the one before) and a new one is
// started (a write that does not fit is split), so a launch keeps at most 2 × limit bytes,
// its newest output, however much the app writes; the app never holds a descriptor of the
// file, cannot reach the directory, and cannot make appbox write anywhere else. Only the newest `LaunchRecords.keptLogs` launches
// of an app keep their logs. Writes are not synced: a log is diagnostics, and a power cut
// may lose its end.

import AppboxCore
import Foundation
import Glibc
import Synchronization

/// The bounded log of one detached launch (see the header).
public final class LaunchLog: @unchecked Sendable {
  /// The bytes a log file reaches before it is rotated (`$APPBOX_LOG_LIMIT`, a test hook,
  /// overrides it).
  public static let defaultLimit = 1 << 20

  public let path: String
  public let launchID: String
  let limit: Int
  /// The app's end of the pipe: its stdout and stderr.
  public let appDescriptor: FileDescriptor
  private let readEnd: FileDescriptor
  private let done = DispatchSemaphore(value: 0)
  private let writeEndOpen = Mutex(true)
  private let tailStorage = Mutex<[UInt8]>([])

  /// Creates the launch's log file (0600) in `directory` and starts the thread that fills
  /// it; deletes the logs of older launches beyond `LaunchRecords.keptLogs`.
  public init(directory: String, launchID: String, limit: Int) throws {
    self.launchID = launchID
    self.limit = max(4096, limit)
    path = directory + "/" + launchID + ".log"
    for parent in [splitPath(directory).directory, directory] where mkdir(parent, 0o700) != 0 {
      guard Errno.current == .exists else { throw SystemError("create directory", path: parent) }
    }
    let file = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_APPEND, mode: 0o600)
    let pipe: (read: FileDescriptor, write: FileDescriptor)
    do {
      pipe = try FileDescriptor.pipe()
    } catch {
      file.close()
      throw error
    }
    readEnd = pipe.read
    appDescriptor = pipe.write
    Self.prune(directory: directory, keeping: LaunchRecords.keptLogs)
    Thread.detachNewThread { [self] in self.pump(into: file) }
  }

  /// Closes appbox's copy of the app's end and waits (up to `timeout`) until the app's
  /// processes have closed theirs and everything they wrote is in the file.
  public func finish(timeout: Duration = .seconds(10)) {
    closeWriteEnd()
    _ = done.wait(timeout: .now() + .milliseconds(Int(timeout.components.seconds * 1000)))
  }

  /// Closes appbox's copy of the app's end (the app's processes keep theirs).
  public func closeWriteEnd() {
    writeEndOpen.withLock { open in
      if open { appDescriptor.close() }
      open = false
    }
  }

  /// The end of what was logged, at most `count` bytes.
  public func tail(_ count: Int = LaunchRecords.tailBytes) -> [UInt8] {
    tailStorage.withLock { Array($0.suffix(count)) }
  }

  private func pump(into file: FileDescriptor) {
    var file = file
    var size = 0
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
      let count = (try? buffer.withUnsafeMutableBytes { try readEnd.read(into: $0) }) ?? 0
      if count <= 0 { break }
      let chunk = buffer[0..<count]
      // Never past `limit` in one file: what does not fit starts the next one.
      var rest = chunk[...]
      while !rest.isEmpty {
        if size >= limit {
          guard let next = rotate(file) else { break }
          file = next
          size = 0
        }
        let part = rest.prefix(limit - size)
        try? file.writeAll(Array(part))
        size += part.count
        rest = rest.dropFirst(part.count)
      }
      tailStorage.withLock { tail in
        tail += chunk
        if tail.count > 2 * LaunchRecords.tailBytes { tail.removeFirst(tail.count - LaunchRecords.tailBytes) }
      }
    }
    file.close()
    readEnd.close()
    done.signal()
  }

  /// `.log` becomes `.log.1` and a new `.log` is opened; nil (keep writing) if that fails.
  private func rotate(_ file: FileDescriptor) -> FileDescriptor? {
    guard rename(path, path + ".1") == 0,
      let next = try? FileDescriptor.open(
        path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_APPEND, mode: 0o600)
    else { return nil }
    file.close()
    return next
  }

  /// Deletes the logs of all but the newest `keeping - 1` launches in `directory` (the new
  /// one makes `keeping`).
  static func prune(directory: String, keeping: Int) {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
    let launches = Set(
      names.compactMap { name -> String? in
        guard let range = name.range(of: ".log") else { return nil }
        return String(name[..<range.lowerBound])
      }
    ).sorted()
    for launch in launches.dropLast(keeping) {
      for suffix in [".log", ".log.1"] { _ = unlink(directory + "/" + launch + suffix) }
    }
  }
}

/// A launch's log as it is on disk.
public struct LaunchLogFile: Sendable {
  public var launchID: String
  /// The current file, and the part rotated out before it (read first).
  public var path: String
  public var previousPath: String { path + ".1" }

  /// Both parts, oldest first.
  public func contents() -> [UInt8] {
    (FileManager.default.contents(atPath: previousPath).map(Array.init) ?? [])
      + (FileManager.default.contents(atPath: path).map(Array.init) ?? [])
  }
}

extension DeviceSession {
  /// The app's launch logs, oldest first.
  public func launchLogs(of app: AppRecord) -> [LaunchLogFile] {
    let directory = root.logDirectory(app.containerID)
    let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
    return names.filter { $0.hasSuffix(".log") }.sorted().map { name in
      LaunchLogFile(launchID: String(name.dropLast(4)), path: directory + "/" + name)
    }
  }
}
