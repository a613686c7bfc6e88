// Holding an app's first uses of its own network until pasta has configured it.
//
// With a network of its own the app starts as soon as its jail is ready, while pasta may
// still be starting (tens of milliseconds: it touches about 31 MB of its bss and fills its
// socket pools before it reports ready). `confine` installs a second seccomp filter
// (Sources/appbox-sandbox/filter.c) under which socket() of every family but AF_UNIX notifies
// a listener (SECCOMP_RET_USER_NOTIF), sends that listener out of the jail with the message
// that says the app starts (SCM_RIGHTS; JailProcess receives it and attaches it here), and
// closes its own copy before it execs the app.
//
// Algorithm (one thread of appbox, for the whole run):
// 1. Poll a wake-up pipe, and the listener once it is attached.
// 2. While pasta is starting, receive each notification and keep its cookie: the call waits.
// 3. Once pasta is up, let every kept call go on (SECCOMP_USER_NOTIF_FLAG_CONTINUE), dropping
//    those no longer waiting (SECCOMP_IOCTL_NOTIF_ID_VALID: their process was killed or a
//    signal interrupted them, and the call restarts as a new notification), and from then on
//    answer each notification at once, the same way.
// 4. If pasta fails, answer every kept and later call with ENETDOWN (the owner stops the jail).
// 5. On stop (the run is over), close the listener: a call notifying after that fails with
//    ENOSYS, but no process of the app is left by then.
// Invariants: the listener never reaches a process of the app. An answer decides nothing:
// CONTINUE runs the call as if the gate's filter were not there, under the app's own filter,
// namespaces and Landlock (the kernel takes the strictest action of all filters, so a family
// the first filter refuses is refused without a notification). So the gate reads nothing of
// the caller's memory and trusts nothing the call carries: seccomp_unotify(2)'s warning about
// CONTINUE (arguments rewritten behind a pointer) does not apply to a call that was going to
// run anyway.

import AppboxCore
import CSystem
import Foundation
import Glibc
import Synchronization

/// The gate of one run; see the file's header.
final class NetworkGate: Sendable {
  /// How held and later calls are answered.
  private enum Answer: Equatable {
    /// Kept waiting: pasta is starting.
    case hold
    /// Let through: pasta is up.
    case proceed
    /// Failed with this errno: pasta failed.
    case fail(Int32)
    /// The run is over: the thread ends.
    case stop
  }

  private let wakeUp: (read: FileDescriptor, write: FileDescriptor)
  private let answer = Mutex<Answer>(.hold)
  /// The listener, from `attach` until the thread takes it.
  private let attached = Mutex<FileDescriptor?>(nil)
  private let ended = DispatchSemaphore(value: 0)

  /// Starts the thread; calls are served once `attach` gives it the listener.
  init() throws {
    wakeUp = try FileDescriptor.pipe()
    Thread.detachNewThread { [self] in
      serve()
      ended.signal()
    }
  }

  /// The listener `confine` sent (which the gate owns from now on). A descriptor that is not a
  /// seccomp listener is closed unused.
  func attach(_ listener: FileDescriptor) {
    guard readLinkTarget("/proc/self/fd/\(listener.rawValue)") == "anon_inode:seccomp notify" else {
      listener.close()
      return
    }
    // Wake this thread on the CPU the caller gives up, as a reply would (Linux 6.6; without
    // it, each call pays for a wake-up on another CPU).
    _ = appbox_seccomp_notify_wake_synchronously(listener.rawValue)
    attached.withLock { $0 = listener }
    wake()
  }

  /// pasta is up: held calls and every later one go on.
  func open() { set(.proceed) }

  /// pasta failed: held calls and every later one fail with `error`.
  func refuse(with error: Errno) { set(.fail(error.rawValue)) }

  /// Ends the thread and waits for it; the listener is closed.
  func stop() {
    set(.stop)
    ended.wait()
    attached.withLock { slot in
      slot?.close()  // attached after the thread ended
      slot = nil
    }
    wakeUp.read.close()
    wakeUp.write.close()
  }

  /// Changes the answer (never back to holding, never after stop) and wakes the thread.
  private func set(_ new: Answer) {
    answer.withLock { current in
      if current == .stop || new == .hold { return }
      if case .fail = current, new == .proceed { return }
      current = new
    }
    wake()
  }

  private func wake() {
    var byte: UInt8 = 1
    _ = write(wakeUp.write.rawValue, &byte, 1)
  }

  /// The thread: steps 1 to 5.
  private func serve() {
    var listener: FileDescriptor?
    var listening = false  // the listener is there and may still notify
    var held: [UInt64] = []
    defer {
      listener?.close()
      attached.withLock { slot in
        slot?.close()
        slot = nil
      }
    }
    while true {
      let current = answer.withLock { $0 }
      if current == .stop { return }
      if listener == nil,
        let received = attached.withLock({ slot -> FileDescriptor? in
          let taken = slot
          slot = nil
          return taken
        })
      {
        listener = received
        listening = true
      }
      if current != .hold, let listener, !held.isEmpty {
        for id in held { respond(to: id, on: listener, with: current, held: true) }
        held.removeAll()
      }
      var entries = [pollfd(fd: wakeUp.read.rawValue, events: Int16(POLLIN), revents: 0)]
      if listening, let listener {
        entries.append(pollfd(fd: listener.rawValue, events: Int16(POLLIN), revents: 0))
      }
      guard poll(&entries, nfds_t(entries.count), -1) >= 0 else {
        if Errno.current == .interrupted { continue }
        return
      }
      if entries[0].revents != 0 {
        var bytes = [UInt8](repeating: 0, count: 64)
        _ = read(wakeUp.read.rawValue, &bytes, bytes.count)
      }
      guard listening, let listener, entries.count > 1 else { continue }
      let events = entries[1].revents
      if events & Int16(POLLIN) != 0 {
        var id: UInt64 = 0
        var number: Int32 = 0
        var argument: UInt64 = 0
        guard appbox_seccomp_notify_receive(listener.rawValue, &id, &number, &argument) == 0 else {
          // ENOENT: the call went away before it was received. Anything else: the listener is
          // unusable, and so the calls fail (ENOSYS) once it is closed, as after the run.
          if Errno.current != .noEntry { listening = false }
          continue
        }
        let now = answer.withLock { $0 }
        if now == .hold {
          held.append(id)
        } else {
          respond(to: id, on: listener, with: now, held: false)
        }
      } else if events & Int16(POLLHUP | POLLERR | POLLNVAL) != 0 {
        listening = false  // no process is left under the filter
      }
    }
  }

  /// Answers call `id` as `answer` says. A held call is checked first (the man page's
  /// SECCOMP_IOCTL_NOTIF_ID_VALID): one that stopped waiting is dropped, not answered.
  private func respond(to id: UInt64, on listener: FileDescriptor, with answer: Answer, held: Bool) {
    if held, appbox_seccomp_notify_is_waiting(listener.rawValue, id) == 0 { return }
    let error: Int32
    switch answer {
    case .proceed: error = 0
    case .fail(let code): error = code
    case .hold, .stop: return
    }
    // ENOENT: the call stopped waiting meanwhile; nothing to answer.
    _ = appbox_seccomp_notify_respond(listener.rawValue, id, error)
  }
}
