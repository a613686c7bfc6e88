import AppboxCore
import AppboxKeychain
import AppboxSecItem
import CSystem
import Foundation
import Glibc
import Synchronization
import Testing

@testable import AppboxSecItemBroker

/// The broker over its real door (a socketpair), with the Swift client on the other end.
struct SecItemBrokerTests {
  @Test func theSwiftClientMakesTheFourCalls() throws {
    let fixture = Fixture()
    let broker = try fixture.broker()
    defer { broker.stop() }
    let client = SecItemClient(descriptor: try #require(broker.appDescriptor).rawValue)
    let added = client.add(query(extra: [kSecValueData: data("pw"), kSecReturnAttributes: .bool(true)]))
    #expect(added.status == errSecSuccess && added.result?[kSecAttrAccount] == .string("acct"))
    #expect(client.add(query(extra: [kSecValueData: data("pw")])).status == errSecDuplicateItem)
    #expect(client.copyMatching(query(extra: [kSecReturnData: .bool(true)])).result == data("pw"))
    #expect(client.update(query(), [kSecValueData: data("pw2")]).status == errSecSuccess)
    #expect(client.copyMatching(query(extra: [kSecReturnData: .bool(true)])).result == data("pw2"))
    #expect(client.delete(query()).status == errSecSuccess)
    let missing = client.copyMatching(query())
    #expect(missing.status == errSecItemNotFound && missing.message?.contains("No keychain item") == true)
    #expect(SecItemStatusName(missing.status) == "errSecItemNotFound")
    #expect(SecCopyErrorMessageString(missing.status, nil)?.contains("could not be found") == true)
  }

  @Test func withoutABrokerCallsAreNotAvailableOrIOErrors() throws {
    let none = SecItemClient(environment: [:])
    #expect(none.door == nil)
    let response = none.copyMatching(query())
    #expect(response.status == errSecNotAvailable && response.message?.contains("APPBOX_SECITEM_FD") == true)
    // A broker that stopped: the door's other end is gone.
    let fixture = Fixture()
    let broker = try fixture.broker()
    let door = try #require(broker.appDescriptor).duplicate()
    defer { door.close() }
    broker.stop()
    #expect(SecItemClient(descriptor: door.rawValue).copyMatching(query()).status == errSecIO)
  }

  @Test func threadsOfOneAppShareOneClientAndNeverSeeEachOthersReplies() throws {
    let fixture = Fixture()
    let broker = try fixture.broker()
    defer { broker.stop() }
    let client = SecItemClient(descriptor: try #require(broker.appDescriptor).rawValue)
    let errors = Mutex(0)
    DispatchQueue.concurrentPerform(iterations: 8) { thread in
      for index in 0..<15 {
        let account = "t\(thread)-\(index)"
        var failed =
          client.add(query("threads", account, [kSecValueData: data(account)])).status != errSecSuccess
        let read = client.copyMatching(query("threads", account, [kSecReturnData: .bool(true)]))
        failed = failed || read.result != data(account)
        failed = failed || client.delete(query("threads", account)).status != errSecSuccess
        if failed { errors.withLock { $0 += 1 } }
      }
    }
    #expect(errors.withLock { $0 } == 0)
  }

  /// Two apps, two brokers, one keychain database: SQLite's busy handling queues their writes.
  @Test func twoBrokersWriteTheSameKeychainAtOnce() throws {
    let fixture = Fixture()
    let notesBroker = try fixture.broker(Apps.notes)
    let otherBroker = try fixture.broker(Apps.other)
    defer {
      notesBroker.stop()
      otherBroker.stop()
    }
    let clients = [
      SecItemClient(descriptor: try #require(notesBroker.appDescriptor).rawValue),
      SecItemClient(descriptor: try #require(otherBroker.appDescriptor).rawValue),
    ]
    let errors = Mutex(0)
    DispatchQueue.concurrentPerform(iterations: 4) { index in
      let client = clients[index % 2]
      for item in 0..<20 {
        let account = "w\(index)-\(item)"
        if client.add(query("both", account, [kSecValueData: data(account)])).status != errSecSuccess {
          errors.withLock { $0 += 1 }
        }
      }
    }
    #expect(errors.withLock { $0 } == 0)
    let keychain = try Keychain(directory: fixture.keychainPath)
    #expect(try keychain.items(for: Apps.notes).count == 40)
    #expect(try keychain.items(for: Apps.other).count == 40)
  }

  /// Raw frames: a bad one ends only its own session; a stalled session holds up nobody.
  @Test func hostileFramesEndOnlyTheirOwnSession() throws {
    let fixture = Fixture()
    let broker = try fixture.broker()
    defer { broker.stop() }
    let door = try #require(broker.appDescriptor).rawValue
    let client = SecItemClient(descriptor: door)

    let stalled = try RawSession(door: door)
    try stalled.send(Array("ASQ".utf8))  // half a header, then nothing

    let misframed = try RawSession(door: door)
    try misframed.send(SecItemWire.frame([1, 2, 3], magic: Array("HTTP".utf8)))
    #expect(misframed.isClosedWithoutAnswer(), "the broker closed the session without answering")

    let huge = try RawSession(door: door)
    try huge.send(Array("ASQ1".utf8) + [0x7F, 0xFF, 0xFF, 0xFF])
    let refusal = try Reply(try huge.receiveReply())
    #expect(refusal.status == errSecParam && refusal.message?.contains("2147483647 bytes") == true)

    let garbage = try RawSession(door: door)
    try garbage.send(SecItemWire.frame(Array("garbage".utf8), magic: SecItemWire.requestMagic))
    #expect(try Reply(try garbage.receiveReply()).status == errSecParam)
    try garbage.send(
      SecItemWire.frame(SecItemWire.request(.copyMatching, query: query()), magic: SecItemWire.requestMagic))
    #expect(try Reply(try garbage.receiveReply()).status == errSecItemNotFound, "the session still answers")

    #expect(client.copyMatching(query()).status == errSecItemNotFound, "the broker still answers")
  }

  /// Junk through the door is ignored: messages without a descriptor, with a descriptor that is
  /// not a stream socket, with two.
  @Test func theDoorIgnoresWhatIsNotOneStreamSocket() throws {
    let fixture = Fixture()
    let broker = try fixture.broker()
    defer { broker.stop() }
    let door = try #require(broker.appDescriptor).rawValue
    #expect(Glibc.send(door, "x", 1, Int32(MSG_NOSIGNAL)) == 1)
    let pipe = try FileDescriptor.pipe()
    defer {
      pipe.read.close()
      pipe.write.close()
    }
    #expect(appbox_send_descriptor(door, pipe.read.rawValue) == 0)
    #expect(appbox_send_descriptor(door, door) == 0)
    // The pipe's read end went to the broker and was closed there: the pipe still has our
    // read end, so write works; what matters is that the broker answers the next session.
    #expect(SecItemClient(descriptor: door).copyMatching(query()).status == errSecItemNotFound)
  }
}

/// A session opened by hand, for frames the clients never send.
final class RawSession {
  let descriptor: Int32

  init(door: Int32) throws {
    var pair: [Int32] = [-1, -1]
    guard appbox_socketpair(0, &pair) == 0 else { throw SystemError("socketpair") }
    defer { close(pair[1]) }
    guard appbox_send_descriptor(door, pair[1]) == 0 else { throw SystemError("send") }
    descriptor = pair[0]
    var timeout = timeval(tv_sec: 10, tv_usec: 0)
    setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
  }

  deinit { close(descriptor) }

  func send(_ bytes: [UInt8]) throws {
    try FileDescriptor(rawValue: descriptor).writeAll(bytes)
  }

  /// Whether the broker closed the session without a byte of answer: end of file, or
  /// ECONNRESET when it closed with our bytes unread.
  func isClosedWithoutAnswer() -> Bool {
    do {
      return try FileDescriptor(rawValue: descriptor).readAll(limit: 1 << 20).isEmpty
    } catch let error as SystemError {
      return error.errno == Errno(rawValue: ECONNRESET)
    } catch {
      return false
    }
  }

  /// One reply frame's body.
  func receiveReply() throws -> [UInt8] {
    let fd = FileDescriptor(rawValue: descriptor)
    let header = try read(fd, SecItemWire.headerSize)
    guard let length = SecItemWire.length(ofHeader: header, magic: SecItemWire.replyMagic) else {
      throw SystemError("not a reply", errno: .invalidArgument)
    }
    return try read(fd, length)
  }

  private func read(_ fd: FileDescriptor, _ count: Int) throws -> [UInt8] {
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: count)
    while bytes.count < count {
      let n = try buffer.withUnsafeMutableBytes {
        try fd.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<(count - bytes.count)]))
      }
      if n == 0 { throw SystemError("read", errno: .ioError) }
      bytes += buffer[0..<n]
    }
    return bytes
  }
}
