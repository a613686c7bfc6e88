// A SecItem-like client for Swift code running inside the sandbox.
//
// One `SecItemClient` keeps one session with the broker (see SecItemWire.swift) and sends
// one request at a time on it: a mutex holds the session from a request's first byte to its
// reply's last, so threads never read each other's replies. A process made by fork() sees
// that the session belongs to its parent (the pid differs) and opens its own. A failure to
// send on an existing session (the broker closed it) is retried once on a new session; a
// request that was sent is never sent twice.

import AppboxCore
import AppboxPlist
import CSystem
import Foundation
import Glibc
import Synchronization

/// What one SecItem call answered: the status, the result when one was asked for, and the
/// broker's one-line explanation of a failure (never a secret).
public struct SecItemResponse: Sendable, Equatable {
  public var status: OSStatus
  public var result: PropertyList?
  public var message: String?

  public init(status: OSStatus, result: PropertyList? = nil, message: String? = nil) {
    self.status = status
    self.result = result
    self.message = message
  }
}

/// A client of the keychain broker, over the door at a descriptor.
public final class SecItemClient: Sendable {
  /// The client of the door `APPBOX_SECITEM_FD` names in this process's environment.
  public static let shared = SecItemClient(environment: ProcessInfo.processInfo.environment)

  private struct Session {
    var descriptor: Int32 = -1
    var owner: pid_t = 0
  }

  /// The door, or nil when the environment named none.
  public let door: Int32?
  private let session = Mutex(Session())

  /// A client of the door at `descriptor` (say one end of a socketpair in a test).
  public init(descriptor: Int32) { door = descriptor }

  /// A client of the door `environment[APPBOX_SECITEM_FD]` names; without one, every call
  /// answers errSecNotAvailable.
  public init(environment: [String: String]) {
    door = environment[SecItemWire.descriptorVariable].flatMap { Int32($0) }.flatMap { $0 >= 0 ? $0 : nil }
  }

  deinit {
    session.withLock { if $0.descriptor >= 0 { Glibc.close($0.descriptor) } }
  }

  // MARK: The four calls

  /// SecItemAdd.
  public func add(_ attributes: [String: PropertyList]) -> SecItemResponse {
    call(.add, query: attributes)
  }

  /// SecItemCopyMatching.
  public func copyMatching(_ query: [String: PropertyList]) -> SecItemResponse {
    call(.copyMatching, query: query)
  }

  /// SecItemUpdate.
  public func update(_ query: [String: PropertyList], _ attributesToUpdate: [String: PropertyList])
    -> SecItemResponse
  {
    call(.update, query: query, attributesToUpdate: attributesToUpdate)
  }

  /// SecItemDelete.
  public func delete(_ query: [String: PropertyList]) -> SecItemResponse {
    call(.delete, query: query)
  }

  private func call(
    _ operation: SecItemWire.Operation, query: [String: PropertyList],
    attributesToUpdate: [String: PropertyList]? = nil
  ) -> SecItemResponse {
    let request = SecItemWire.request(operation, query: query, attributesToUpdate: attributesToUpdate)
    guard request.count <= SecItemWire.maximumRequestSize else {
      return SecItemResponse(
        status: errSecParam, message: "The request is larger than the broker accepts (4 MiB)")
    }
    let reply: [UInt8]
    do {
      reply = try exchange(request)
    } catch let error as SystemError where error.errno == .badDescriptor && door == nil {
      return SecItemResponse(
        status: errSecNotAvailable,
        message:
          "No keychain broker: \(SecItemWire.descriptorVariable) is not set (run this inside 'appbox run' "
          + "or 'appbox launch')")
    } catch {
      return SecItemResponse(status: errSecIO, message: "The keychain broker could not be reached: \(error)")
    }
    guard let answer = try? PropertyList.decode(Data(reply)), let status = answer["status"]?.integer,
      let code = OSStatus(exactly: status)
    else {
      return SecItemResponse(status: errSecIO, message: "The keychain broker sent a malformed reply")
    }
    return SecItemResponse(status: code, result: answer["result"], message: answer["message"]?.string)
  }

  // MARK: Frames

  /// Sends `body` as one request frame and returns the reply frame's body. Throws
  /// `SystemError` (EBADF without a door; EPROTO for a reply that is not a reply frame).
  public func exchange(_ body: [UInt8]) throws -> [UInt8] {
    guard let door else { throw SystemError("reach the keychain broker", errno: .badDescriptor) }
    return try session.withLock { session in
      if session.descriptor >= 0 && session.owner != getpid() {
        Glibc.close(session.descriptor)  // the parent's, inherited through fork(): not ours
        session.descriptor = -1
      }
      let frame = SecItemWire.frame(body, magic: SecItemWire.requestMagic)
      for attempt in 0..<2 {
        let fresh = session.descriptor < 0
        if fresh { session = Session(descriptor: try Self.connect(door), owner: getpid()) }
        do {
          try Self.send(frame, on: session.descriptor)
        } catch {
          Glibc.close(session.descriptor)
          session.descriptor = -1
          if fresh || attempt == 1 { throw error }
          continue
        }
        do {
          let header = try Self.receive(SecItemWire.headerSize, from: session.descriptor)
          guard let length = SecItemWire.length(ofHeader: header, magic: SecItemWire.replyMagic),
            length <= SecItemWire.maximumReplySize
          else { throw SystemError("read the keychain broker's reply", errno: Errno(rawValue: EPROTO)) }
          return try Self.receive(length, from: session.descriptor)
        } catch {
          Glibc.close(session.descriptor)
          session.descriptor = -1
          throw error
        }
      }
      throw SystemError("reach the keychain broker", errno: Errno(rawValue: EIO))
    }
  }

  /// Opens a session through `door`: a stream socketpair, one end sent through the door.
  private static func connect(_ door: Int32) throws -> Int32 {
    var pair: [Int32] = [-1, -1]
    guard appbox_socketpair(0, &pair) == 0 else { throw SystemError("open a keychain session") }
    defer { Glibc.close(pair[1]) }
    guard appbox_send_descriptor(door, pair[1]) == 0 else {
      let error = SystemError("open a keychain session through descriptor \(door)")
      Glibc.close(pair[0])
      throw error
    }
    return pair[0]
  }

  private static func send(_ bytes: [UInt8], on descriptor: Int32) throws {
    var offset = 0
    while offset < bytes.count {
      let written = bytes.withUnsafeBytes {
        Glibc.send(descriptor, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL))
      }
      if written < 0 && errno == EINTR { continue }
      guard written > 0 else { throw SystemError("send a keychain request") }
      offset += written
    }
  }

  private static func receive(_ count: Int, from descriptor: Int32) throws -> [UInt8] {
    var bytes = [UInt8](repeating: 0, count: count)
    var offset = 0
    while offset < count {
      let read = bytes.withUnsafeMutableBytes {
        Glibc.recv(descriptor, $0.baseAddress! + offset, count - offset, 0)
      }
      if read < 0 && errno == EINTR { continue }
      if read == 0 {
        throw SystemError("read the keychain broker's reply", errno: Errno(rawValue: ECONNRESET))
      }
      guard read > 0 else { throw SystemError("read the keychain broker's reply") }
      offset += read
    }
    return bytes
  }
}

// MARK: The platform's functions

/// SecItemAdd over `SecItemClient.shared`: adds the item `attributes` describe; `result`
/// (when given) receives what kSecReturnData / kSecReturnAttributes asked for.
public func SecItemAdd(_ attributes: [String: PropertyList], _ result: UnsafeMutablePointer<PropertyList?>?)
  -> OSStatus
{
  let response = SecItemClient.shared.add(attributes)
  result?.pointee = response.result
  return response.status
}

/// SecItemCopyMatching over `SecItemClient.shared`.
public func SecItemCopyMatching(
  _ query: [String: PropertyList], _ result: UnsafeMutablePointer<PropertyList?>?
)
  -> OSStatus
{
  let response = SecItemClient.shared.copyMatching(query)
  result?.pointee = response.result
  return response.status
}

/// SecItemUpdate over `SecItemClient.shared`.
public func SecItemUpdate(_ query: [String: PropertyList], _ attributesToUpdate: [String: PropertyList])
  -> OSStatus
{
  SecItemClient.shared.update(query, attributesToUpdate).status
}

/// SecItemDelete over `SecItemClient.shared`.
public func SecItemDelete(_ query: [String: PropertyList]) -> OSStatus {
  SecItemClient.shared.delete(query).status
}
