// The wire protocol between a confined app and its keychain broker.
//
// The door: the app inherits one end of a SOCK_SEQPACKET socketpair at the descriptor
// named by APPBOX_SECITEM_FD (3). Its only use is opening sessions: a client makes a
// SOCK_STREAM socketpair and sends one end through the door (one message, one SCM_RIGHTS
// descriptor). The broker serves the received end as a session of the app whose door it
// came through; the identity is the door's, never something a message says.
//
// A session carries request/reply pairs, one at a time, each a frame: four magic bytes
// ("ASQ1" for a request, "ASP1" for a reply), a 32-bit big-endian length, then that many
// bytes of a binary property list (bplist00):
//
//   request  { "operation": "SecItemAdd" | "SecItemCopyMatching" | "SecItemUpdate" | "SecItemDelete",
//              "query": { kSecClass: "genp", kSecAttrService: ..., ... },
//              "attributesToUpdate": { ... } }              (SecItemUpdate only)
//   reply    { "status": OSStatus, "result": ... (when asked for), "message": "..." (on failure) }
//
// Limits: a request frame up to 4 MiB, a reply up to 64 MiB, property lists 32 levels deep.

import AppboxCore
import AppboxPlist
import Foundation

/// Constants and framing shared by the broker and its clients.
public enum SecItemWire {
  /// The environment variable naming the door's descriptor.
  public static let descriptorVariable = "APPBOX_SECITEM_FD"
  /// The descriptor number the door has in every confined app.
  public static let descriptorNumber: Int32 = 3
  /// Bytes in a frame header: magic, then the length.
  public static let headerSize = 8
  public static let requestMagic: [UInt8] = Array("ASQ1".utf8)
  public static let replyMagic: [UInt8] = Array("ASP1".utf8)
  /// The largest request the broker reads (an item's data is at most 1 MiB).
  public static let maximumRequestSize = 4 << 20
  /// The largest reply a client accepts; the broker answers errSecAllocate instead of
  /// sending more.
  public static let maximumReplySize = 64 << 20
  /// Nesting a request may have (the broker's decode limit).
  public static let maximumDepth = 32

  /// The four operations.
  public enum Operation: String, Sendable, CaseIterable {
    case add = "SecItemAdd"
    case copyMatching = "SecItemCopyMatching"
    case update = "SecItemUpdate"
    case delete = "SecItemDelete"
  }

  /// A frame: `magic`, the length of `body`, then `body`.
  public static func frame(_ body: [UInt8], magic: [UInt8]) -> [UInt8] {
    let length = UInt32(clamping: body.count)
    return magic + [
      UInt8(length >> 24), UInt8((length >> 16) & 0xFF), UInt8((length >> 8) & 0xFF), UInt8(length & 0xFF),
    ]
      + body
  }

  /// The length a frame header announces, or nil when its magic is not `magic`.
  public static func length(ofHeader header: some Collection<UInt8>, magic: [UInt8]) -> Int? {
    let bytes = Array(header)
    guard bytes.count == headerSize, Array(bytes[0..<4]) == magic else { return nil }
    return bytes[4...].reduce(0) { $0 << 8 | Int($1) }
  }

  /// A request's property list.
  public static func request(
    _ operation: Operation, query: [String: PropertyList], attributesToUpdate: [String: PropertyList]? = nil
  ) -> [UInt8] {
    var request: [String: PropertyList] = [
      "operation": .string(operation.rawValue), "query": .dictionary(query),
    ]
    if let attributesToUpdate { request["attributesToUpdate"] = .dictionary(attributesToUpdate) }
    return Array(PropertyList.dictionary(request).binaryData())
  }

  /// A reply's property list.
  public static func reply(status: OSStatus, result: PropertyList? = nil, message: String? = nil) -> [UInt8] {
    var reply: [String: PropertyList] = ["status": .integer(Int64(status))]
    if let result { reply["result"] = result }
    if let message { reply["message"] = .string(message) }
    return Array(PropertyList.dictionary(reply).binaryData())
  }
}
