// The keychain broker: serves one app's SecItem requests from the supervising appbox
// process while the app runs (the platform's securityd, for one app).
//
// Algorithm: a SOCK_SEQPACKET socketpair is the door; its app end is handed to the app at
// a fixed descriptor (SecItemWire.descriptorNumber), its broker end stays here. One thread
// polls the door, the sessions and a wake-up pipe:
// - a door message carrying exactly one descriptor that is a UNIX stream socket opens a
//   session (anything else: the descriptors are closed, the message ignored); at
//   `maximumSessions` the door is not read until a session ends, so clients wait;
// - a session reads one frame at a time, never more bytes than the frame still needs: a
//   header (a wrong magic closes the session, as the stream can no longer be trusted; a
//   length above the limit is answered with errSecParam and the body is read and dropped),
//   then the body, which `SecItemService` answers; the reply is written without blocking,
//   and the session is not read again until its reply is out. End of file mid-frame (a
//   truncated message) closes that session only;
// - the wake-up pipe ends the thread (`stop`).
// Nothing blocks: every socket operation is non-blocking (MSG_DONTWAIT), so a client that
// stops reading or writing halfway stalls only its own session. Replies waiting to be sent
// are bounded in total (`maximumPendingBytes`): beyond it no new request is read.
//
// Invariants: every session is served with the identity the broker was started for; the
// descriptors the broker receives are close-on-exec, so no child of appbox inherits them.

import AppboxCore
import AppboxKeychain
import AppboxSecItem
import CSystem
import Foundation
import Glibc

/// A running broker for one app.
public final class SecItemBroker: @unchecked Sendable {
  /// Sessions served at once; further door messages wait in the door.
  public static let maximumSessions = 64
  /// Reply bytes waiting to be sent, over all sessions, before no new request is read.
  public static let maximumPendingBytes = 128 << 20

  /// The app's end of the door: pass it to the app at `SecItemWire.descriptorNumber`, then
  /// close it here (`closeAppDescriptor`) once the app has started.
  public private(set) var appDescriptor: FileDescriptor?
  private let wake: (read: FileDescriptor, write: FileDescriptor)
  private let finished = DispatchSemaphore(value: 0)
  private var stopped = false

  /// Starts serving `client` with the keychain in `keychainDirectory` on a thread of its own.
  public convenience init(client: KeychainClient, keychainDirectory: String) throws {
    try self.init(service: SecItemService(client: client, keychainDirectory: keychainDirectory))
  }

  /// Starts serving `client` with the keychain `openKeychain` opens, on a thread of its own.
  public convenience init(client: KeychainClient, openKeychain: @escaping () throws -> Keychain) throws {
    try self.init(service: SecItemService(client: client, openKeychain: openKeychain))
  }

  /// Starts serving requests with `service` on a thread of its own.
  public init(service: SecItemService) throws {
    var pair: [Int32] = [-1, -1]
    guard appbox_socketpair(1, &pair) == 0 else { throw SystemError("create the keychain broker's socket") }
    let wake: (read: FileDescriptor, write: FileDescriptor)
    do {
      wake = try FileDescriptor.pipe()
    } catch {
      Glibc.close(pair[0])
      Glibc.close(pair[1])
      throw error
    }
    self.wake = wake
    appDescriptor = FileDescriptor(rawValue: pair[1])
    let loop = BrokerLoop(door: FileDescriptor(rawValue: pair[0]), wake: wake.read, service: service)
    let done = finished
    let thread = Thread {
      loop.run()
      done.signal()
    }
    thread.name = "appbox keychain broker"
    thread.start()
  }

  deinit { stop() }

  /// Closes this process's copy of the app's end (the app keeps its own).
  public func closeAppDescriptor() {
    appDescriptor?.close()
    appDescriptor = nil
  }

  /// Ends the broker: every session is closed and the thread is gone when this returns.
  public func stop() {
    guard !stopped else { return }
    stopped = true
    closeAppDescriptor()
    _ = try? wake.write.writeAll([1])
    finished.wait()
    wake.write.close()
    wake.read.close()
  }
}

/// One session's progress through its current frame.
private struct Session {
  enum Stage {
    case header
    case body(Int)
    case discard(Int)
  }

  let descriptor: Int32
  var stage = Stage.header
  var input: [UInt8] = []
  var output: [UInt8] = []
  var written = 0

  var hasOutput: Bool { written < output.count }
}

/// The broker's thread: owns the door, the sessions and the service.
private final class BrokerLoop: @unchecked Sendable {
  let door: FileDescriptor
  let wake: FileDescriptor
  let service: SecItemService
  var doorOpen = true
  var sessions: [Session] = []
  var pendingBytes = 0

  init(door: FileDescriptor, wake: FileDescriptor, service: SecItemService) {
    self.door = door
    self.wake = wake
    self.service = service
  }

  func run() {
    defer {
      for session in sessions { Glibc.close(session.descriptor) }
      door.close()
    }
    while true {
      var polled = [pollfd(fd: wake.rawValue, events: Int16(POLLIN), revents: 0)]
      let acceptsSessions = doorOpen && sessions.count < SecItemBroker.maximumSessions
      if acceptsSessions { polled.append(pollfd(fd: door.rawValue, events: Int16(POLLIN), revents: 0)) }
      let readsRequests = pendingBytes < SecItemBroker.maximumPendingBytes
      let sessionBase = polled.count
      for session in sessions {
        let events = session.hasOutput ? POLLOUT : (readsRequests ? POLLIN : 0)
        polled.append(pollfd(fd: session.descriptor, events: Int16(events), revents: 0))
      }
      let ready = polled.withUnsafeMutableBufferPointer { poll($0.baseAddress, nfds_t($0.count), -1) }
      if ready < 0 {
        if errno == EINTR { continue }
        return
      }
      if polled[0].revents != 0 { return }
      if acceptsSessions && polled[1].revents != 0 { acceptSessions() }
      var closed: [Int] = []
      for index in 0..<(polled.count - sessionBase) {
        let revents = Int32(polled[sessionBase + index].revents)
        if revents == 0 { continue }
        if !serve(&sessions[index], revents: revents) { closed.append(index) }
      }
      for index in closed.reversed() {
        let session = sessions.remove(at: index)
        pendingBytes -= session.output.count - session.written
        Glibc.close(session.descriptor)
      }
    }
  }

  /// Reads the door's pending messages, opening a session for each valid one.
  private func acceptSessions() {
    var buffer = [UInt8](repeating: 0, count: 16)
    // A bounded number per round, so a flood of junk messages cannot keep the loop here.
    for _ in 0..<SecItemBroker.maximumSessions where sessions.count < SecItemBroker.maximumSessions {
      var received: Int32 = -1
      var truncated: Int32 = 0
      let count = buffer.withUnsafeMutableBytes {
        appbox_receive_descriptor(door.rawValue, $0.baseAddress, $0.count, &received, &truncated)
      }
      if count < 0 {
        if errno == EINTR { continue }
        if errno != EAGAIN && errno != EWOULDBLOCK { doorOpen = false }
        return
      }
      if count == 0 && received < 0 {
        doorOpen = false  // every process of the app closed its end
        return
      }
      guard received >= 0 else { continue }
      guard truncated == 0, appbox_socket_domain(received) == AF_UNIX,
        appbox_socket_type(received) == Int32(SOCK_STREAM.rawValue)
      else {
        Glibc.close(received)
        continue
      }
      sessions.append(Session(descriptor: received))
    }
  }

  /// Moves `session` on after poll reported `revents`; false when it must be closed.
  private func serve(_ session: inout Session, revents: Int32) -> Bool {
    if revents & (POLLERR | POLLNVAL) != 0 { return false }
    if session.hasOutput {
      return flush(&session)
    }
    guard revents & (POLLIN | POLLHUP) != 0 else { return true }
    return read(&session)
  }

  /// Reads what the current frame still needs (never into the next frame).
  private func read(_ session: inout Session) -> Bool {
    let wanted: Int
    switch session.stage {
    case .header: wanted = SecItemWire.headerSize - session.input.count
    case .body(let length): wanted = min(length - session.input.count, 1 << 18)
    case .discard(let left): wanted = min(left, 1 << 18)
    }
    var chunk = [UInt8](repeating: 0, count: max(wanted, 1))
    let count = chunk.withUnsafeMutableBytes {
      recv(session.descriptor, $0.baseAddress, wanted, Int32(MSG_DONTWAIT))
    }
    if count < 0 { return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR }
    if count == 0 { return false }  // end of file: a truncated frame, or the client left
    switch session.stage {
    case .discard(let left):
      session.stage = left - count == 0 ? .header : .discard(left - count)
      return true
    case .header, .body:
      session.input += chunk[0..<count]
    }
    switch session.stage {
    case .header where session.input.count == SecItemWire.headerSize:
      guard let length = SecItemWire.length(ofHeader: session.input, magic: SecItemWire.requestMagic) else {
        return false  // not a request frame: the stream cannot be trusted any more
      }
      session.input = []
      if length > SecItemWire.maximumRequestSize {
        session.stage = .discard(length)
        return reply(
          SecItemWire.reply(
            status: errSecParam,
            message:
              "The request is \(length) bytes, more than the \(SecItemWire.maximumRequestSize >> 20) MiB "
              + "the broker accepts"), on: &session)
      }
      session.stage = .body(length)
      if length == 0 { return answer(&session) }
    case .body(let length) where session.input.count == length:
      return answer(&session)
    default:
      break
    }
    return true
  }

  private func answer(_ session: inout Session) -> Bool {
    let body = session.input
    session.input = []
    session.stage = .header
    return reply(service.answer(body), on: &session)
  }

  private func reply(_ body: [UInt8], on session: inout Session) -> Bool {
    session.output = SecItemWire.frame(body, magic: SecItemWire.replyMagic)
    session.written = 0
    pendingBytes += session.output.count
    return flush(&session)
  }

  /// Writes what the socket takes now of the pending reply.
  private func flush(_ session: inout Session) -> Bool {
    while session.hasOutput {
      let count = session.output.withUnsafeBytes {
        send(
          session.descriptor, $0.baseAddress! + session.written, $0.count - session.written,
          Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
      }
      if count < 0 {
        if errno == EINTR { continue }
        return errno == EAGAIN || errno == EWOULDBLOCK
      }
      session.written += count
      pendingBytes -= count
    }
    session.output = []
    session.written = 0
    return true
  }
}
