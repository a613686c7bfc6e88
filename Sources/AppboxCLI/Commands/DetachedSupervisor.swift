import AppboxContainer
import AppboxCore
import Foundation
import Glibc

// The process behind `launch --detach` (Lifecycle/DetachedApps.swift in AppboxContainer
// describes the protocol): the appbox executable started again with the reserved first
// argument. It opens the device as `launch` does, runs the launch with the app's output into
// its log, reports "started" (or the failure, with the status the command line would exit
// with) to the launching appbox, and exits with the app.

extension AppboxCLI {
  /// Runs as a detached launch's supervisor; returns the exit status (the app's).
  static func superviseDetachedLaunch(environment: [String: String]) -> Int32 {
    var replied = false
    do {
      let request = try DetachedLaunch.becomeSupervisor()
      let context = CommandContext(
        globals: GlobalOptions(), environment: environment,
        lockWait: (try? LockWait.of(GlobalOptions(), environment: environment)) ?? .none,
        stdout: DescriptorSink(fd: 1), stderr: DescriptorSink(fd: 2))
      let session = try DeviceSession.open(
        root: DeviceRoot(path: request.root), mutating: false, recovery: context.recoverySteps,
        environment: environment, lockWait: context.lockWait)
      let status = try session.superviseDetachedLaunch(request) { start in
        replied = true
        DetachedLaunch.replyStarted(start.run, log: start.log)
      }
      session.protection.finishPendingLock()
      return status
    } catch {
      let status = ExitStatus.of(error)
      if !replied { DetachedLaunch.replyFailed(status: status, message: errorMessage(shown(error))) }
      return status
    }
  }
}
