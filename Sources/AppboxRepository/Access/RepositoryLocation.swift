// Where a repository is, as `--repo` names it, and what opening it takes.
//
//   --repo DIR                        a local directory (default: <root>/Backups)
//   --repo s3://BUCKET[/PREFIX]       a bucket of an S3 store, at --endpoint URL (or
//                                     $APPBOX_S3_ENDPOINT), path-style, --region (or
//                                     $APPBOX_S3_REGION, default us-east-1); credentials from
//                                     $AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY, or
//                                     --credentials-file F (the AWS CLI's `credentials` format:
//                                     aws_access_key_id = …, aws_secret_access_key = …, the
//                                     [default] profile or the only one; or the two on two lines);
//                                     an https endpoint's certificate checked against the system's
//                                     authorities, or those in $APPBOX_S3_CA_FILE

import AppboxCore
import AppboxS3
import Foundation

/// A repository's place.
public enum RepositoryLocation: Sendable {
  case directory(String)
  case s3(bucket: String, prefix: String, configuration: S3Configuration)

  /// What `--repo` and its companion options say. `text` nil means `defaultDirectory`.
  public static func parse(
    _ text: String?, defaultDirectory: String, endpoint: String? = nil, region: String? = nil,
    credentialsFile: String? = nil, environment: [String: String]
  ) throws -> RepositoryLocation {
    guard let text, text.hasPrefix("s3://") else {
      if endpoint != nil || credentialsFile != nil {
        throw RepositoryError(
          .invalidRequest, "--endpoint and --credentials-file apply to an s3:// repository only")
      }
      return .directory(absolute(text ?? defaultDirectory))
    }
    let rest = text.dropFirst(5)
    let bucket = String(rest.prefix { $0 != "/" })
    var prefix = String(rest.dropFirst(bucket.count + (rest.count > bucket.count ? 1 : 0)))
    while prefix.hasPrefix("/") { prefix.removeFirst() }
    while prefix.hasSuffix("/") { prefix.removeLast() }
    guard isValidBucket(bucket) else {
      throw RepositoryError(
        .invalidRequest,
        "'\(bucket)' is not a bucket name (3 to 63 lowercase letters, digits, dots and hyphens): --repo s3://BUCKET/PREFIX"
      )
    }
    guard !prefix.split(separator: "/").contains(where: { $0 == "." || $0 == ".." }) else {
      throw RepositoryError(.invalidRequest, "the prefix of '\(text)' contains '.' or '..'")
    }
    guard let endpoint = endpoint ?? environment["APPBOX_S3_ENDPOINT"], !endpoint.isEmpty else {
      throw RepositoryError(
        .invalidRequest, "an s3:// repository needs --endpoint URL (or APPBOX_S3_ENDPOINT)")
    }
    let credentials = try loadCredentials(file: credentialsFile, environment: environment)
    let attempts = environment["APPBOX_S3_ATTEMPTS"].flatMap(Int.init) ?? 5
    return .s3(
      bucket: bucket, prefix: prefix,
      configuration: S3Configuration(
        endpoint: endpoint, region: region ?? environment["APPBOX_S3_REGION"] ?? "us-east-1",
        credentials: credentials, attempts: attempts, caFile: environment["APPBOX_S3_CA_FILE"]))
  }

  /// For messages: the path, or `s3://bucket/prefix`.
  public var description: String {
    switch self {
    case .directory(let path): return path
    case .s3(let bucket, let prefix, _): return "s3://\(bucket)" + (prefix.isEmpty ? "" : "/\(prefix)")
    }
  }

  /// An output file's absolute path (relative ones are taken from the current directory).
  public static func absoluteForOutput(_ path: String) -> String { absolute(path) }

  static func absolute(_ path: String) -> String {
    var trimmed = path
    while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
    if !trimmed.hasPrefix("/") { trimmed = FileManager.default.currentDirectoryPath + "/" + trimmed }
    return trimmed
  }

  static func isValidBucket(_ name: String) -> Bool {
    guard (3...63).contains(name.count), let first = name.first, let last = name.last,
      first.isLetter || first.isNumber, last.isLetter || last.isNumber
    else { return false }
    return name.allSatisfy { ($0.isASCII && ($0.isLowercase || $0.isNumber)) || $0 == "-" || $0 == "." }
  }

  /// Credentials from `file`, else the environment; `.invalidRequest` when there are none.
  static func loadCredentials(file: String?, environment: [String: String]) throws -> S3Credentials {
    if let file {
      let bytes: [UInt8]
      do {
        bytes = try FileDescriptor.open(file, O_RDONLY).closeAfter { try $0.readAll(limit: 1 << 20) }
      } catch let error as SystemError {
        // Missing is "no such file" (66); unreadable is what the errno says (77 denied, 64 a
        // directory, 74 I/O): never "snapshot not found".
        throw RepositoryError(
          .unreadable(error.kind), "Unable to read the credentials file '\(file)': \(error.errno)",
          cause: error)
      }
      guard let credentials = parseCredentials(String(decoding: bytes, as: UTF8.self)) else {
        throw RepositoryError(
          .invalidRequest,
          "'\(file)' holds no credentials: give aws_access_key_id = … and aws_secret_access_key = … "
            + "(or the two on two lines)")
      }
      return credentials
    }
    guard let key = environment["AWS_ACCESS_KEY_ID"], let secret = environment["AWS_SECRET_ACCESS_KEY"],
      !key.isEmpty, !secret.isEmpty
    else {
      throw RepositoryError(
        .invalidRequest,
        "an s3:// repository needs credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or --credentials-file F"
      )
    }
    return S3Credentials(accessKey: key, secretKey: secret)
  }

  /// The AWS CLI's credentials file (its [default] profile, or its only one), or two lines.
  static func parseCredentials(_ text: String) -> S3Credentials? {
    var profiles: [String: [String: String]] = [:]
    var order: [String] = []
    var current = ""
    var plain: [String] = []
    for raw in text.split(whereSeparator: \.isNewline) {
      let line = raw.trimmingCharacters(in: .whitespaces)
      if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
      if line.hasPrefix("[") && line.hasSuffix("]") {
        current = String(line.dropFirst().dropLast()).trimmingCharacters(in: .whitespaces)
        order.append(current)
        continue
      }
      if let equals = line.firstIndex(of: "=") {
        let name = line[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
        let value = line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces)
        if current.isEmpty && !order.contains("") { order.append("") }
        profiles[current, default: [:]][name] = value
      } else {
        plain.append(line)
      }
    }
    let chosen = profiles["default"] ?? (order.count == 1 ? profiles[order[0]] : nil)
    if let chosen, let key = chosen["aws_access_key_id"], let secret = chosen["aws_secret_access_key"] {
      return S3Credentials(accessKey: key, secretKey: secret)
    }
    if profiles.isEmpty && plain.count == 2 { return S3Credentials(accessKey: plain[0], secretKey: plain[1]) }
    return nil
  }
}

/// What opening a repository may need besides its location.
public struct RepositoryOptions: Sendable {
  /// Create the repository (unencrypted) when there is none.
  public var create: Bool
  public var environment: [String: String]
  /// Where this device keeps the catalogs of repositories that cannot hold their own (remote
  /// or encrypted ones): `<root>/.appbox/cache`. nil: `$XDG_CACHE_HOME/appbox` or `~/.cache/appbox`.
  public var cacheDirectory: String?
  /// Asked for the password when the repository turns out to be encrypted (only then).
  public var password: (@Sendable () throws -> [UInt8])?
  /// A secret bound to this device (from its device key), under which the device keeps the
  /// key of an encrypted repository it has unlocked (Repository/KeyCache.swift); nil keeps none.
  public var deviceSecret: (@Sendable () throws -> [UInt8])?
  /// Whether the user gave a password (a file), so expects an encrypted repository: a plain
  /// one is then refused (Repository/EncryptionMemory.swift).
  public var passwordGiven = false
  /// Accept a plain repository where this device used an encrypted one (`repo init --allow-plain`).
  public var allowPlain = false
  /// The command only reads the repository: when the catalog cannot be written (a full or
  /// read-only file system), it is read as the last sync left it instead of failing.
  public var readOnly = false
  /// How long to wait for a lock another appbox holds (`--wait`): the app's writer lock waits
  /// this long, the repository-wide and prune locks at least 5 seconds.
  public var lockWait: LockWait

  public init(
    create: Bool = false, environment: [String: String] = ProcessInfo.processInfo.environment,
    cacheDirectory: String? = nil, password: (@Sendable () throws -> [UInt8])? = nil,
    deviceSecret: (@Sendable () throws -> [UInt8])? = nil, passwordGiven: Bool = false,
    lockWait: LockWait = .none
  ) {
    self.lockWait = lockWait
    self.passwordGiven = passwordGiven
    self.create = create
    self.environment = environment
    self.cacheDirectory = cacheDirectory
    self.password = password
    self.deviceSecret = deviceSecret
  }

  var resolvedCacheDirectory: String {
    if let cacheDirectory { return cacheDirectory }
    if let xdg = environment["XDG_CACHE_HOME"], xdg.hasPrefix("/") { return xdg + "/appbox" }
    return (environment["HOME"] ?? NSHomeDirectory()) + "/.cache/appbox"
  }
}
