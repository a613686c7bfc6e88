// AppboxS3 is appbox's own small client for the S3 API (path-style addressing, AWS Signature
// Version 4), enough for a backup repository: buckets, whole and ranged object reads,
// streaming multipart uploads, listings, deletes. It owns libcurl (the only module that
// imports CCurl) and depends on AppboxCore and AppboxCrypto (HMAC-SHA256, SHA-256, MD5).
// It never prints; every failure is an `S3Error` whose kind the CLI maps to an exit status:
// bad credentials and refused access are `.denied` (77), a store that cannot be reached or
// keeps failing is `.unavailable` (69), a missing object or bucket `.notFound` (66), and any
// other failure of a transfer `.io` (74).

import AppboxCore

/// A failed S3 request: what was attempted, on which object, and why.
public struct S3Error: AppboxFailure, Equatable {
  public var kind: FailureKind
  /// "PUT", "GET", "LIST"...: the operation, with the object it was on.
  public var operation: String
  /// `s3://bucket/key` (or `s3://bucket`).
  public var target: String
  /// The HTTP status, when the store answered.
  public var status: Int?
  /// S3's error code (`NoSuchKey`, `SignatureDoesNotMatch`) or libcurl's error text.
  public var code: String?
  public var message: String

  public init(
    kind: FailureKind, operation: String, target: String, status: Int? = nil, code: String? = nil,
    message: String
  ) {
    self.kind = kind
    self.operation = operation
    self.target = target
    self.status = status
    self.code = code
    self.message = message
  }

  public var description: String {
    var text = "Unable to \(operation) '\(target)': \(message)"
    if let code, !message.contains(code) { text += " (\(code))" }
    return text
  }

  /// Whether trying the same request again may succeed: the store was unreachable or busy,
  /// the connection dropped, or it answered 5xx or 429.
  var isTransient: Bool {
    if let status { return status >= 500 || status == 429 || code == "SlowDown" || code == "RequestTimeout" }
    return kind == .unavailable || kind == .io
  }
}
