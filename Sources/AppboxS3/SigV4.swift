import AppboxCrypto
import Foundation

/// AWS Signature Version 4 for S3 requests (the `Authorization` header form), as AWS's
/// "Signature Calculations for the Authorization Header" describes it: a canonical request,
/// a string to sign over its SHA-256, and an HMAC-SHA256 chain from the secret key through
/// date, region, service and "aws4_request". A pure function of its inputs, so the published
/// test vectors check it exactly.
public struct SigV4Signer: Sendable {
  public var accessKey: String
  public var secretKey: String
  public var region: String
  public var service: String

  public init(accessKey: String, secretKey: String, region: String, service: String = "s3") {
    self.accessKey = accessKey
    self.secretKey = secretKey
    self.region = region
    self.service = service
  }

  /// The empty payload's SHA-256, which requests without a body sign.
  public static let emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

  /// What signing produced: the headers to add and, for tests, the intermediate forms.
  public struct Signature: Sendable {
    public var authorization: String
    public var canonicalRequest: String
    public var stringToSign: String
    public var signedHeaders: String
    public var signature: String
  }

  /// Signs a request. `path` is the request path as sent, already URI-encoded (S3's keys are
  /// encoded once, never normalized); `query` the decoded parameters; `headers` every header
  /// to sign (at least `host`, `x-amz-date` and, for S3, `x-amz-content-sha256`);
  /// `timestamp` the `x-amz-date` value (`yyyyMMdd'T'HHmmss'Z'`).
  public func sign(
    method: String, path: String, query: [(String, String)], headers: [(String, String)],
    payloadHash: String, timestamp: String
  ) throws -> Signature {
    let encodedQuery: [(name: String, value: String)] = query.map { name, value in
      (Self.encode(name, keepSlash: false), Self.encode(value, keepSlash: false))
    }
    let sortedQuery = encodedQuery.sorted { $0.name == $1.name ? $0.value < $1.value : $0.name < $1.name }
    let canonicalQuery = sortedQuery.map { $0.name + "=" + $0.value }.joined(separator: "&")
    var byName: [String: [String]] = [:]
    for (name, value) in headers {
      byName[name.lowercased(), default: []].append(Self.trimmed(value))
    }
    let names = byName.keys.sorted()
    let canonicalHeaders = names.map { "\($0):\(byName[$0]!.joined(separator: ","))\n" }.joined()
    let signedHeaders = names.joined(separator: ";")
    let canonicalRequest = [
      method, path, canonicalQuery, canonicalHeaders, signedHeaders, payloadHash,
    ].joined(separator: "\n")
    let day = String(timestamp.prefix(8))
    let scope = "\(day)/\(region)/\(service)/aws4_request"
    let stringToSign = [
      "AWS4-HMAC-SHA256", timestamp, scope, SHA256.hash(Array(canonicalRequest.utf8)).hex,
    ].joined(separator: "\n")
    var key = Array(("AWS4" + secretKey).utf8)
    for part in [day, region, service, "aws4_request"] {
      key = try HMACSHA256.authenticationCode(for: Array(part.utf8), key: key)
    }
    let signature = Self.hex(try HMACSHA256.authenticationCode(for: Array(stringToSign.utf8), key: key))
    let authorization =
      "AWS4-HMAC-SHA256 Credential=\(accessKey)/\(scope), SignedHeaders=\(signedHeaders), Signature=\(signature)"
    return Signature(
      authorization: authorization, canonicalRequest: canonicalRequest, stringToSign: stringToSign,
      signedHeaders: signedHeaders, signature: signature)
  }

  /// URI-encodes as SigV4 requires: every byte but the unreserved `A-Z a-z 0-9 - . _ ~`
  /// becomes `%XX` (uppercase hex), `/` too unless `keepSlash` (object key paths).
  public static func encode(_ text: String, keepSlash: Bool) -> String {
    var result = ""
    result.reserveCapacity(text.utf8.count)
    for byte in text.utf8 {
      switch byte {
      case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
        UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
        UInt8(ascii: "~"):
        result.unicodeScalars.append(Unicode.Scalar(byte))
      case UInt8(ascii: "/") where keepSlash:
        result.append("/")
      default:
        result +=
          "%" + String(byte >> 4, radix: 16, uppercase: true) + String(byte & 15, radix: 16, uppercase: true)
      }
    }
    return result
  }

  /// A header value as the canonical form wants it: outer spaces removed, inner runs of
  /// spaces collapsed to one.
  static func trimmed(_ value: String) -> String {
    value.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
  }

  static func hex(_ bytes: [UInt8]) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var out = [UInt8]()
    out.reserveCapacity(bytes.count * 2)
    for byte in bytes {
      out.append(digits[Int(byte >> 4)])
      out.append(digits[Int(byte & 15)])
    }
    return String(decoding: out, as: UTF8.self)
  }

  /// `yyyyMMdd'T'HHmmss'Z'` for `date`, in UTC.
  public static func timestamp(_ date: Date) -> String {
    var seconds = time_t(date.timeIntervalSince1970)
    var parts = tm()
    gmtime_r(&seconds, &parts)
    return String(
      format: "%04d%02d%02dT%02d%02d%02dZ", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1,
      Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec))
  }
}
