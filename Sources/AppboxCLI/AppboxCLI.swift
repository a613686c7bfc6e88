import AppboxBackup
import AppboxContainer
import AppboxCore
import AppboxCrypto
import AppboxRepository
import Foundation
import Glibc

/// The appbox command line.
public enum AppboxCLI {
  public static let version = "0.1.0"

  /// Every top-level command, in the order help lists them.
  public static let commands: [any ParsableCommand.Type] = [
    DeviceCommand.self, InstallCommand.self, ListCommand.self, InspectCommand.self, PathCommand.self,
    UninstallCommand.self, UpdateCommand.self, RevertCommand.self, ResetCommand.self, OffloadCommand.self,
    RunCommand.self, LaunchCommand.self, PsCommand.self, TerminateCommand.self, LogsCommand.self,
    OpenURLCommand.self, SimctlCommand.self,
    FilesCommand.self,
    DefaultsCommand.self, ExcludeCommand.self, ProtectCommand.self, BackupCommand.self, SnapshotsCommand.self,
    RestoreCommand.self,
    DiffCommand.self, LsCommand.self, DumpCommand.self, FindCommand.self, MountCommand.self,
    CheckCommand.self, ForgetCommand.self, RepoCommand.self, ArchiveCommand.self,
    ExportCommand.self, ImportCommand.self, ExportBackupCommand.self, ImportBackupCommand.self,
    WhyCommand.self, AdviseCommand.self, KeychainCommand.self, HelpCommand.self,
  ]

  /// The root page's examples (`appbox --help`).
  static let manual = CommandDescription(
    name: "appbox", abstract: "iOS-style sandboxed app containers on Linux.",
    examples: [
      .init(
        "Make a device, install an app and look at its home:", "appbox device init --name \"QA iPhone\"",
        "appbox install Notes.app", "appbox inspect com.example.notes"),
      .init(
        "Back the app up, change its data, and restore the snapshot:", "appbox backup com.example.notes",
        "appbox defaults com.example.notes write launchCount 4 --type int", "appbox restore com.example.notes"
      ),
      .init("Run a shell in the app's sandbox:", "appbox run com.example.notes -- /bin/sh"),
      .init("Read a command's page:", "appbox help backup"),
    ])

  public static let runner = CommandRunner(commands: commands, version: version, manual: manual)

  /// Runs the process's command line and exits with its status.
  public static func main() -> Never {
    OpenSSLExitCleanup.disable()  // threads may still be ending as appbox exits
    if CommandLine.arguments.dropFirst().first == DetachedLaunch.supervisorArgument {
      exit(superviseDetachedLaunch(environment: ProcessInfo.processInfo.environment))
    }
    let status = runner.run(
      Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment,
      stdout: DescriptorSink(fd: 1), stderr: DescriptorSink(fd: 2))
    exit(status)
  }
}

extension CommandContext {
  /// The device root chosen by --root, $APPBOX_ROOT or the default.
  var deviceRoot: DeviceRoot { DeviceRoot.resolve(explicit: globals.root, environment: environment) }

  /// Fails with exit 66 ("no device at ROOT") unless the root holds a device: only install
  /// and device init create one (`ParsableCommand.createsDevice`).
  func requireExistingDevice() throws { try deviceRoot.requireDevice() }

  /// Opens the device. A mutating session finishes what its command deferred (deleting an
  /// old home an update replaced) after the output is written, holding the root lock until then.
  /// `creating`: make the device when the root has none (install, device init).
  func openDevice(mutating: Bool, creating: Bool = false) throws -> DeviceSession {
    let session = try DeviceSession.open(
      root: deviceRoot, mutating: mutating, creating: creating, recovery: recoverySteps,
      environment: environment, lockWait: lockWait)
    if mutating { afterOutput { session.finishDeferredWork() } }
    if case .released(let inodes, let bytes) = session.reserve {
      note(
        "note: the file system of \(session.root.path) is full (\(inodes) inodes and \(bytes / 1024) KiB free): "
          + "appbox released its reserve (\(SpaceReserve.inodeCount) inodes, "
          + "\(SpaceReserve.byteCount >> 10) KiB) for this command; free some space (an app's data: "
          + "'appbox inspect APP' shows its size)")
    }
    return session
  }

  var recoverySteps: [any RecoveryStep] {
    [
      UpdateRecovery(), HomeSwapRecovery(), LifecycleRecovery(), ContainerRecovery(), GroupRecovery(),
      ProtectionRecovery(),
    ]
  }
}

/// Formats dates as ISO 8601 in UTC, the same in text and JSON.
func timestamp(_ date: Date) -> String { utcTimestamp(date) }

/// Lays out rows in columns padded to the widest cell (the last column is not padded).
/// Listings with a row per file use `StreamedTable`, which lays out the same way by batches.
func table(_ header: [String], _ rows: [[String]]) -> String {
  let all = [header] + rows
  let widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
  return all.map { tableRow($0, widths: widths) }.joined(separator: "\n")
}

/// One row of a table: each cell but the last padded to its column's width, two spaces between.
func tableRow(_ row: [String], widths: [Int]) -> String {
  row.enumerated().map { index, cell in
    index == row.count - 1 ? cell : cell.padding(toLength: widths[index], withPad: " ", startingAt: 0)
  }.joined(separator: "  ")
}

/// "1.2 MB"-style sizes for people (JSON always has exact bytes).
func byteCount(_ bytes: Int64) -> String {
  let units = ["B", "KB", "MB", "GB", "TB"]
  var value = Double(bytes)
  var unit = 0
  while value >= 1000 && unit < units.count - 1 {
    value /= 1000
    unit += 1
  }
  return unit == 0 ? "\(bytes) B" : String(format: "%.1f %@", value, units[unit])
}

let appArgument = CommandDescription.Positional("APP", help: "A bundle identifier or container id.")
