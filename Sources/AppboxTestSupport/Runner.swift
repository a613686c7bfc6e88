import AppboxCore
import Foundation
import Glibc

/// The result of running a program to completion.
public struct ProcessResult: Sendable {
  public var status: Int32
  public var stdout: [UInt8]
  public var stderr: [UInt8]
  public var out: String { String(decoding: stdout, as: UTF8.self) }
  public var err: String { String(decoding: stderr, as: UTF8.self) }
}

/// The directory of the built products (`.build/<triple>/debug`), where the test bundle runs.
public let productsDirectory: String = {
  let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? ""
  var directory = splitPath(executable).directory
  // `swift test` runs `<products>/appboxPackageTests.xctest`, a file in the products directory.
  while !FileManager.default.fileExists(atPath: directory + "/appbox"), directory.count > 1 {
    directory = splitPath(directory).directory
  }
  return directory
}()

/// Runs `executable` with `arguments`, feeding `input` on stdin; returns status and output.
/// Reads both pipes concurrently so a chatty child cannot deadlock.
public func runProcess(
  _ executable: String, _ arguments: [String], environment: [String: String]? = nil, input: [UInt8] = [],
  currentDirectory: String? = nil
) throws -> ProcessResult {
  let process = Process()
  process.executableURL = URL(fileURLWithPath: executable)
  process.arguments = arguments
  if let environment { process.environment = environment }
  if let currentDirectory { process.currentDirectoryURL = URL(fileURLWithPath: currentDirectory) }
  let stdoutPipe = Pipe()
  let stderrPipe = Pipe()
  let stdinPipe = Pipe()
  process.standardOutput = stdoutPipe
  process.standardError = stderrPipe
  process.standardInput = stdinPipe
  try process.run()
  let group = DispatchGroup()
  nonisolated(unsafe) var out = Data()
  nonisolated(unsafe) var err = Data()
  DispatchQueue.global().async(group: group) { out = stdoutPipe.fileHandleForReading.readDataToEndOfFile() }
  DispatchQueue.global().async(group: group) { err = stderrPipe.fileHandleForReading.readDataToEndOfFile() }
  if !input.isEmpty { stdinPipe.fileHandleForWriting.write(Data(input)) }
  try? stdinPipe.fileHandleForWriting.close()
  group.wait()
  process.waitUntilExit()
  let status =
    process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
  return ProcessResult(status: status, stdout: Array(out), stderr: Array(err))
}

/// Runs the built `appbox` with `--root root` prepended.
public func appbox(
  _ arguments: [String], root: String?, environment extra: [String: String] = [:], input: [UInt8] = []
)
  throws -> ProcessResult
{
  var environment = ProcessInfo.processInfo.environment
  environment.removeValue(forKey: "APPBOX_ROOT")
  for (key, value) in extra { environment[key] = value }
  let args = (root.map { ["--root", $0] } ?? []) + arguments
  return try runProcess(productsDirectory + "/appbox", args, environment: environment, input: input)
}
