// The S3 operations a backup repository needs, each one request (listings and deletes page
// through as many as it takes), signed with SigV4 and retried with backoff.
//
// Retries: a request that could not connect, dropped its connection, timed out, or got a
// 5xx, 429 or SlowDown answer is sent again, up to `attempts` times in all, after waits of
// 0.1 s, 0.2 s, 0.4 s... (capped at 2 s, with jitter). A streamed read that dropped resumes
// from the byte it had reached (a ranged GET), so a long download survives a dropped
// connection. Every request is idempotent (a repeated PUT writes the same bytes), so
// repeating one whose answer was lost is safe. What still fails becomes an `S3Error`:
// `.unavailable` (69) when the store could not be reached or kept answering 5xx, `.denied`
// (77) for credentials or signatures it refused, `.notFound` (66), or `.io` (74).

import AppboxCore
import AppboxPipeline
import AppboxCrypto
import Foundation
import Glibc

/// Access keys for SigV4.
public struct S3Credentials: Sendable, Equatable {
  public var accessKey: String
  public var secretKey: String
  public init(accessKey: String, secretKey: String) {
    self.accessKey = accessKey
    self.secretKey = secretKey
  }
}

/// Where the store is and how to talk to it.
public struct S3Configuration: Sendable {
  /// `http://host:port` or `https://host` (a path after the host is kept as a prefix).
  public var endpoint: String
  public var region: String
  public var credentials: S3Credentials
  /// Tries per request, the first included.
  public var attempts: Int
  /// The size of each part of a multipart upload (at least 5 MiB, S3's minimum).
  public var partSize: Int
  /// Certificate authorities to trust for an https endpoint, instead of the system's.
  public var caFile: String?

  public init(
    endpoint: String, region: String = "us-east-1", credentials: S3Credentials, attempts: Int = 5,
    partSize: Int = 16 << 20, caFile: String? = nil
  ) {
    self.endpoint = endpoint
    self.region = region
    self.credentials = credentials
    self.attempts = max(1, attempts)
    self.partSize = max(5 << 20, partSize)
    self.caFile = caFile
  }
}

/// One object of a listing.
public struct S3ObjectInfo: Sendable, Equatable {
  public var key: String
  public var size: Int64
  /// The store's time of the object's last write (its clock, not ours).
  public var lastModified: Date
}

/// An S3 client for one endpoint. Thread-safe: each request takes a connection of its own
/// from a small pool.
///
/// `@unchecked Sendable`, for a documented reason: the pool's idle connections (curl handles,
/// not Sendable) go in and out behind `lock`, but a request's connection is tied up with the
/// caller's non-Sendable receiver while in use, so region isolation cannot see it handed back
/// whole. `lock` guards `idle` and `clockOffset`; a connection is used by one request at a time.
public final class S3Client: @unchecked Sendable {
  public let configuration: S3Configuration
  let signer: SigV4Signer
  private let scheme: String
  private let hostHeader: String
  private let basePath: String
  private let lock = Monitor()
  private var idle: [HTTPConnection] = []
  /// The store's clock minus ours, from the last response's `Date` header.
  private var clockOffset: TimeInterval = 0

  public init(_ configuration: S3Configuration) throws {
    self.configuration = configuration
    var endpoint = configuration.endpoint
    while endpoint.hasSuffix("/") { endpoint.removeLast() }
    guard let schemeEnd = endpoint.range(of: "://"),
      ["http", "https"].contains(endpoint[..<schemeEnd.lowerBound].lowercased())
    else {
      throw S3Error(
        kind: .invalidArgument, operation: "use the endpoint", target: configuration.endpoint,
        message: "an endpoint is http://HOST[:PORT] or https://HOST[:PORT]")
    }
    scheme = endpoint[..<schemeEnd.lowerBound].lowercased()
    let rest = endpoint[schemeEnd.upperBound...]
    let slash = rest.firstIndex(of: "/") ?? rest.endIndex
    hostHeader = String(rest[..<slash])
    basePath = String(rest[slash...])
    guard !hostHeader.isEmpty else {
      throw S3Error(
        kind: .invalidArgument, operation: "use the endpoint", target: configuration.endpoint,
        message: "the endpoint names no host")
    }
    signer = SigV4Signer(
      accessKey: configuration.credentials.accessKey, secretKey: configuration.credentials.secretKey,
      region: configuration.region)
  }

  /// The store's current time, as its last answer told it (our clock, corrected).
  public var storeTime: Date { Date().addingTimeInterval(lock.withLock { clockOffset }) }

  // MARK: Requests

  /// One request's description.
  struct Request {
    var method: String
    var bucket: String
    var key: String?
    var query: [(String, String)] = []
    var headers: [(String, String)] = []
    var body: [UInt8]?
    /// Statuses besides 2xx to return instead of throwing.
    var accepted: Set<Int> = []
    var operation: String
  }

  func target(_ bucket: String, _ key: String?) -> String {
    key.map { "s3://\(bucket)/\($0)" } ?? "s3://\(bucket)"
  }

  /// Sends `request` with retries; returns the answer (2xx or an accepted status).
  /// With `receive`, a 2xx body streams there (no resuming: see `read(_:range:into:)`).
  func send(_ request: Request, receive: ((UnsafeRawBufferPointer) -> Bool)? = nil) throws -> HTTPResponse {
    var attempt = 0
    while true {
      attempt += 1
      do {
        return try sendOnce(request, receive: receive)
      } catch let error as S3Error where error.isTransient && attempt < configuration.attempts {
        backOff(attempt)
      }
    }
  }

  /// Waits before try `attempt + 1`: 0.1 s doubling, at most 2 s, with up to 50% jitter.
  func backOff(_ attempt: Int) {
    let base = min(2.0, 0.1 * pow(2.0, Double(attempt - 1)))
    usleep(useconds_t(base * Double.random(in: 0.5...1.0) * 1_000_000))
  }

  private func sendOnce(_ request: Request, receive: ((UnsafeRawBufferPointer) -> Bool)?) throws
    -> HTTPResponse
  {
    let payloadHash = request.body.map { SHA256.hash($0).hex } ?? SigV4Signer.emptyPayloadHash
    var path = basePath + "/" + SigV4Signer.encode(request.bucket, keepSlash: false)
    if let key = request.key { path += "/" + SigV4Signer.encode(key, keepSlash: true) }
    let timestamp = SigV4Signer.timestamp(Date())
    var headers =
      request.headers + [
        ("Host", hostHeader), ("x-amz-date", timestamp), ("x-amz-content-sha256", payloadHash),
      ]
    let signature = try signer.sign(
      method: request.method, path: path, query: request.query, headers: headers, payloadHash: payloadHash,
      timestamp: timestamp)
    headers.append(("Authorization", signature.authorization))
    var url = "\(scheme)://\(hostHeader)\(path)"
    if !request.query.isEmpty {
      url +=
        "?"
        + request.query.map {
          SigV4Signer.encode($0.0, keepSlash: false) + "=" + SigV4Signer.encode($0.1, keepSlash: false)
        }.joined(separator: "&")
    }
    let connection = try takeConnection(request)
    let response: HTTPResponse
    do {
      response = try (request.body ?? []).withUnsafeBytes { body in
        try connection.perform(
          HTTPRequest(
            method: request.method, url: url, headers: headers, body: request.body == nil ? nil : body,
            caFile: configuration.caFile),
          receive: receive)
      }
    } catch let failure as TransportFailure {
      // The connection is in an unknown state: let it go.
      throw S3Error(
        kind: failure.couldNotConnect ? .unavailable : .io, operation: request.operation,
        target: target(request.bucket, request.key), code: "curl \(failure.code)",
        message: failure.couldNotConnect
          ? "the store at \(configuration.endpoint) cannot be reached (\(failure.message))"
          : "the connection to \(configuration.endpoint) failed (\(failure.message))")
    }
    giveBack(connection)
    if let date = response.headers["date"], let serverDate = Self.parseHTTPDate(date) {
      lock.withLock { clockOffset = serverDate.timeIntervalSinceNow }
    }
    if (200..<300).contains(response.status) || request.accepted.contains(response.status) { return response }
    throw error(for: response, request)
  }

  /// The `S3Error` for an answer that is not a success.
  func error(for response: HTTPResponse, _ request: Request) -> S3Error {
    let document = XMLElement.parse(response.body)
    let code = document?.value("Code")
    let message = document?.value("Message")
    let kind: FailureKind
    var text: String
    switch response.status {
    case 401, 403:
      kind = .denied
      switch code {
      case "InvalidAccessKeyId":
        text = "the store does not know the access key '\(configuration.credentials.accessKey)'"
      case "SignatureDoesNotMatch": text = "the store refused the request's signature (wrong secret key?)"
      case "RequestTimeTooSkewed": text = "this machine's clock is too far from the store's"
      default: text = "access denied"
      }
    case 404:
      kind = .notFound
      text =
        code == "NoSuchBucket"
        ? "no such bucket" : code == "NoSuchUpload" ? "no such upload" : "no such object"
    case 500..<600, 429:
      kind = .unavailable
      text = "the store answered \(response.status)" + (message.map { ": \($0)" } ?? "")
    default:
      kind = .io
      text = "the store answered \(response.status)" + (message.map { ": \($0)" } ?? "")
    }
    return S3Error(
      kind: kind, operation: request.operation, target: target(request.bucket, request.key),
      status: response.status, code: code, message: text)
  }

  private func takeConnection(_ request: Request) throws -> HTTPConnection {
    if let connection = lock.withLock({ idle.popLast() }) { return connection }
    do {
      return try HTTPConnection()
    } catch let failure {
      throw S3Error(
        kind: .unavailable, operation: request.operation, target: target(request.bucket, request.key),
        message: failure.message)
    }
  }

  private func giveBack(_ connection: HTTPConnection) {
    lock.withLock { if idle.count < 8 { idle.append(connection) } }
  }

  // MARK: Buckets

  /// Creates `bucket`; one that exists already and is ours is fine.
  public func createBucket(_ bucket: String) throws {
    let response = try send(
      Request(method: "PUT", bucket: bucket, accepted: [409], operation: "create bucket"))
    if response.status == 409 {
      let code = XMLElement.parse(response.body)?.value("Code")
      guard code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists" else {
        throw error(for: response, Request(method: "PUT", bucket: bucket, operation: "create bucket"))
      }
      // Someone else's bucket of that name would refuse us here.
      guard try bucketExists(bucket) else {
        throw S3Error(
          kind: .denied, operation: "create bucket", target: target(bucket, nil), status: 409, code: code,
          message: "the bucket exists and belongs to someone else")
      }
    }
  }

  /// Whether `bucket` exists (and we may use it).
  public func bucketExists(_ bucket: String) throws -> Bool {
    let response = try send(
      Request(method: "HEAD", bucket: bucket, accepted: [404], operation: "look up bucket"))
    return response.status != 404
  }

  // MARK: Objects

  /// Writes a whole object in one request.
  public func put(_ bucket: String, _ key: String, _ bytes: [UInt8]) throws {
    _ = try send(
      Request(
        method: "PUT", bucket: bucket, key: key, headers: [("Content-Type", "application/octet-stream")],
        body: bytes, operation: "write"))
  }

  /// Reads a whole object into memory (for small ones); `.notFound` when missing.
  public func get(_ bucket: String, _ key: String) throws -> [UInt8] {
    var bytes: [UInt8] = []
    try read(bucket, key, range: nil) { chunk in bytes.append(contentsOf: chunk) }
    return bytes
  }

  /// Streams the bytes of `range` (nil: all; an open end: `offset...`) to `sink`, resuming
  /// with a ranged GET from where it stopped when a connection drops. `sink` may throw to
  /// stop; its error is rethrown.
  public func read(
    _ bucket: String, _ key: String, range: (offset: Int64, length: Int64?)?,
    into sink: (UnsafeRawBufferPointer) throws -> Void
  ) throws {
    try withoutActuallyEscaping(sink) { sink in try read(bucket, key, range: range, escapingSink: sink) }
  }

  private func read(
    _ bucket: String, _ key: String, range: (offset: Int64, length: Int64?)?,
    escapingSink sink: @escaping (UnsafeRawBufferPointer) throws -> Void
  ) throws {
    var position = range?.offset ?? 0
    let end = range?.length.map { (range?.offset ?? 0) + $0 }
    if let end, position >= end { return }
    var attempt = 0
    var sinkError: Error?
    while true {
      attempt += 1
      var headers: [(String, String)] = []
      if range != nil || position > 0 {
        headers.append(("Range", "bytes=\(position)-" + (end.map { String($0 - 1) } ?? "")))
      }
      let before = position
      do {
        _ = try sendOnce(
          Request(method: "GET", bucket: bucket, key: key, headers: headers, operation: "read"),
          receive: { chunk in
            do {
              try sink(chunk)
              position += Int64(chunk.count)
              return true
            } catch {
              sinkError = error
              return false
            }
          })
        if let sinkError { throw sinkError }
        if let end, position < end {
          throw S3Error(
            kind: .io, operation: "read", target: target(bucket, key),
            message:
              "the store sent \(position - (range?.offset ?? 0)) of \(end - (range?.offset ?? 0)) bytes")
        }
        return
      } catch let error as S3Error where error.isTransient {
        if let sinkError { throw sinkError }
        // Progress since the last try earns a fresh count of tries.
        if position > before { attempt = 1 }
        guard attempt < configuration.attempts else { throw error }
        backOff(attempt)
      }
    }
  }

  /// The object's size and time, or nil when it does not exist.
  public func head(_ bucket: String, _ key: String) throws -> S3ObjectInfo? {
    let response = try send(
      Request(method: "HEAD", bucket: bucket, key: key, accepted: [404], operation: "look up"))
    guard response.status != 404 else { return nil }
    return S3ObjectInfo(
      key: key, size: Int64(response.headers["content-length"] ?? "") ?? 0,
      lastModified: response.headers["last-modified"].flatMap(Self.parseHTTPDate) ?? Date())
  }

  /// Deletes one object (deleting a missing one is not an error).
  public func delete(_ bucket: String, _ key: String) throws {
    _ = try send(Request(method: "DELETE", bucket: bucket, key: key, accepted: [404], operation: "delete"))
  }

  /// Deletes many objects, 1000 per request (`DeleteObjects`, which wants a `Content-MD5`).
  public func delete(_ bucket: String, keys: [String]) throws {
    var start = 0
    while start < keys.count {
      let batch = keys[start..<min(keys.count, start + 1000)]
      start += batch.count
      let body = Array(
        ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Delete><Quiet>true</Quiet>"
          + batch.map { "<Object><Key>\(escapeMarkup($0))</Key></Object>" }.joined() + "</Delete>").utf8)
      let md5 = Data(try MD5.hash(body)).base64EncodedString()
      let response = try send(
        Request(
          method: "POST", bucket: bucket, query: [("delete", "")],
          headers: [("Content-MD5", md5), ("Content-Type", "application/xml")], body: body,
          operation: "delete objects"))
      if let failed = XMLElement.parse(response.body)?.all("Error").first(where: {
        $0.value("Code") != "NoSuchKey"
      }) {
        throw S3Error(
          kind: .io, operation: "delete", target: target(bucket, failed.value("Key")),
          code: failed.value("Code"),
          message: failed.value("Message") ?? "the store could not delete it")
      }
    }
  }

  /// Every object whose key starts with `prefix`, in key order (all pages of ListObjectsV2).
  public func list(_ bucket: String, prefix: String) throws -> [S3ObjectInfo] {
    try list(bucket, prefix: prefix, pageSize: 1000)
  }

  func list(_ bucket: String, prefix: String, pageSize: Int) throws -> [S3ObjectInfo] {
    var objects: [S3ObjectInfo] = []
    var token: String?
    repeat {
      var query = [("list-type", "2"), ("prefix", prefix), ("max-keys", String(pageSize))]
      if let token { query.append(("continuation-token", token)) }
      let response = try send(Request(method: "GET", bucket: bucket, query: query, operation: "list"))
      guard let document = XMLElement.parse(response.body), document.name == "ListBucketResult" else {
        throw S3Error(
          kind: .io, operation: "list", target: target(bucket, prefix), status: response.status,
          message: "the store's answer is not a listing")
      }
      for item in document.all("Contents") {
        guard let key = item.value("Key"), let size = Int64(item.value("Size") ?? "") else { continue }
        objects.append(
          S3ObjectInfo(
            key: key, size: size,
            lastModified: item.value("LastModified").flatMap(Self.parseISODate) ?? Date()))
      }
      token = document.value("IsTruncated") == "true" ? document.value("NextContinuationToken") : nil
    } while token != nil
    return objects
  }

  // MARK: Multipart uploads

  func startMultipart(_ bucket: String, _ key: String) throws -> String {
    let response = try send(
      Request(
        method: "POST", bucket: bucket, key: key, query: [("uploads", "")],
        headers: [("Content-Type", "application/octet-stream")], body: [], operation: "start upload of"))
    guard let id = XMLElement.parse(response.body)?.value("UploadId"), !id.isEmpty else {
      throw S3Error(
        kind: .io, operation: "start upload of", target: target(bucket, key),
        message: "the store gave no upload id")
    }
    return id
  }

  func uploadPart(_ bucket: String, _ key: String, uploadID: String, number: Int, bytes: [UInt8]) throws
    -> String
  {
    let response = try send(
      Request(
        method: "PUT", bucket: bucket, key: key,
        query: [("partNumber", String(number)), ("uploadId", uploadID)], body: bytes,
        operation: "upload part of"))
    guard let etag = response.headers["etag"] else {
      throw S3Error(
        kind: .io, operation: "upload part of", target: target(bucket, key), message: "the store gave no ETag"
      )
    }
    return etag
  }

  func completeMultipart(_ bucket: String, _ key: String, uploadID: String, etags: [String]) throws {
    let body = Array(
      ("<CompleteMultipartUpload>"
        + etags.enumerated().map {
          "<Part><PartNumber>\($0.offset + 1)</PartNumber><ETag>\(escapeMarkup($0.element))</ETag></Part>"
        }.joined() + "</CompleteMultipartUpload>").utf8)
    let request = Request(
      method: "POST", bucket: bucket, key: key, query: [("uploadId", uploadID)],
      headers: [("Content-Type", "application/xml")], body: body, operation: "complete upload of")
    let response: HTTPResponse
    do {
      response = try send(request)
    } catch let error as S3Error where error.kind == .notFound {
      // A completion retried after its answer was lost finds the upload gone: it is done
      // when the object is there.
      if try head(bucket, key) != nil { return }
      throw error
    }
    // S3 may answer 200 and put the failure in the body.
    if let document = XMLElement.parse(response.body), document.name == "Error" {
      throw error(for: HTTPResponse(status: 500, headers: [:], body: response.body), request)
    }
  }

  /// Abandons an upload: its parts are deleted, nothing becomes visible.
  public func abortMultipart(_ bucket: String, _ key: String, uploadID: String) throws {
    _ = try send(
      Request(
        method: "DELETE", bucket: bucket, key: key, query: [("uploadId", uploadID)], accepted: [404],
        operation: "abort upload of"))
  }

  /// Uploads in progress (or abandoned) under `prefix`: key, id and when each started.
  public func listMultipartUploads(_ bucket: String, prefix: String) throws -> [(
    key: String, uploadID: String, initiated: Date
  )] {
    var uploads: [(key: String, uploadID: String, initiated: Date)] = []
    var markers: (key: String, id: String)?
    repeat {
      var query = [("uploads", ""), ("prefix", prefix)]
      if let markers { query += [("key-marker", markers.key), ("upload-id-marker", markers.id)] }
      let response = try send(
        Request(method: "GET", bucket: bucket, query: query, operation: "list uploads in"))
      guard let document = XMLElement.parse(response.body) else { break }
      for upload in document.all("Upload") {
        guard let key = upload.value("Key"), let id = upload.value("UploadId") else { continue }
        uploads.append((key, id, upload.value("Initiated").flatMap(Self.parseISODate) ?? Date()))
      }
      if document.value("IsTruncated") == "true", let key = document.value("NextKeyMarker"),
        let id = document.value("NextUploadIdMarker"), !key.isEmpty
      {
        markers = (key, id)
      } else {
        markers = nil
      }
    } while markers != nil
    return uploads
  }

  // MARK: Dates

  /// `Mon, 30 Nov 2026 20:48:24 GMT` (RFC 7231's preferred form).
  static func parseHTTPDate(_ text: String) -> Date? {
    let parts = text.split(separator: " ")
    let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    guard parts.count == 6, parts[5] == "GMT", let day = Int(parts[1]),
      let month = months.firstIndex(of: String(parts[2])), let year = Int(parts[3])
    else { return nil }
    let clock = parts[4].split(separator: ":").compactMap { Int($0) }
    guard clock.count == 3 else { return nil }
    return date(
      year: year, month: month + 1, day: day, hour: clock[0], minute: clock[1], second: Double(clock[2]))
  }

  /// `2026-11-30T20:48:24.123Z` (the fraction is optional).
  static func parseISODate(_ text: String) -> Date? {
    let bytes = Array(text.utf8)
    func number(_ range: Range<Int>) -> Int? {
      guard range.upperBound <= bytes.count else { return nil }
      return Int(String(decoding: bytes[range], as: UTF8.self))
    }
    guard bytes.count >= 20, let year = number(0..<4), let month = number(5..<7), let day = number(8..<10),
      let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19),
      bytes[4] == UInt8(ascii: "-"), bytes[10] == UInt8(ascii: "T"), bytes.last == UInt8(ascii: "Z")
    else { return nil }
    var fraction = 0.0
    if bytes[19] == UInt8(ascii: ".") {
      fraction = Double("0." + String(decoding: bytes[20..<(bytes.count - 1)], as: UTF8.self)) ?? 0
    }
    return date(
      year: year, month: month, day: day, hour: hour, minute: minute, second: Double(second) + fraction)
  }

  /// A UTC calendar time as a date (days from the civil calendar, Howard Hinnant's method).
  static func date(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Double) -> Date? {
    guard (1...12).contains(month), (1...31).contains(day), (0..<24).contains(hour), (0..<60).contains(minute)
    else { return nil }
    let y = month <= 2 ? year - 1 : year
    let era = (y >= 0 ? y : y - 399) / 400
    let yearOfEra = y - era * 400
    let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
    let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
    let days = era * 146097 + dayOfEra - 719468
    return Date(timeIntervalSince1970: Double(days * 86400 + hour * 3600 + minute * 60) + second)
  }
}
