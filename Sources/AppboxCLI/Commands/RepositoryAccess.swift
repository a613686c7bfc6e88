import AppboxBackup
import AppboxContainer
import AppboxCore
import AppboxKeychain
import AppboxRepository
import Foundation
import Glibc

// How commands reach a repository: `--repo DIR|s3://BUCKET/PREFIX`, the store's endpoint and
// credentials, and the password of an encrypted one.

let repositoryAccessOptions: [CommandDescription.Option] = [
  .init(
    "endpoint", value: "URL", help: "The S3 store of an s3:// repository (default: $APPBOX_S3_ENDPOINT).",
    environment: [.s3Endpoint]),
  .init(
    "region", value: "R", help: "The S3 region to sign for (default: $APPBOX_S3_REGION, else us-east-1).",
    environment: [.s3Region]),
  .init(
    "credentials-file", value: "F",
    help: "S3 keys from F (AWS credentials format) instead of $AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY.",
    environment: [.accessKey, .secretKey]),
  .init(
    "password-file", value: "F",
    help:
      "An encrypted repository's password from F's first line (default: $APPBOX_PASSWORD_FILE, else stdin).",
    environment: [.passwordFile]),
]

extension CommandContext {
  /// Where this device keeps its caches of remote and encrypted repositories.
  var repositoryCacheDirectory: String { deviceRoot.stateDirectory + "/cache" }

  /// The location --repo names (with --endpoint, --region, --credentials-file), else the
  /// device root's `Backups`.
  func repositoryLocation(_ arguments: ParsedArguments?) throws -> RepositoryLocation {
    try RepositoryLocation.parse(
      arguments?.value("repo"), defaultDirectory: deviceRoot.backups, endpoint: arguments?.value("endpoint"),
      region: arguments?.value("region"), credentialsFile: arguments?.value("credentials-file"),
      environment: environment)
  }

  /// What opening a repository takes: the cache directory and where a password comes from
  /// (--password-file, $APPBOX_PASSWORD_FILE, else standard input: asked for on a terminal).
  func repositoryOptions(_ arguments: ParsedArguments?, create: Bool) -> RepositoryOptions {
    let named = arguments?.value("password-file") ?? environment["APPBOX_PASSWORD_FILE"]
    let file = named ?? "-"
    let keychains = deviceRoot.keychains
    let warn: @Sendable (String) -> Void = { [self] in self.warn($0) }
    return RepositoryOptions(
      create: create, environment: environment, cacheDirectory: repositoryCacheDirectory,
      password: { try readPassword(file, prompt: "Repository password", warn: warn) },
      deviceSecret: {
        try Keychain(directory: keychains).deviceBoundSecret(purpose: "repository key cache v1")
      }, passwordGiven: named != nil, lockWait: lockWait)
  }

  /// The repository named by --repo, else the device root's `Backups`.
  /// `readOnly`: the command only reads the repository (it still reads on a full disk).
  func repository(_ arguments: ParsedArguments, create: Bool, readOnly: Bool = false) throws -> Repository {
    var options = repositoryOptions(arguments, create: create)
    options.readOnly = readOnly
    return try Repository(location: try repositoryLocation(arguments), options: options)
  }

  /// The device's own repository (`<root>/Backups`), as update and revert use it.
  func defaultRepository(create: Bool = true) throws -> Repository {
    try Repository(location: .directory(deviceRoot.backups), options: repositoryOptions(nil, create: create))
  }

  /// The device's keychain as backups see it: snapshots carry the app's items, sealed
  /// under the device key (and, in an encrypted repository, the portable ones under its key).
  var keychainSnapshotter: (any KeychainSnapshotting)? { DeviceKeychainSnapshotter(root: deviceRoot) }
}

/// A password: the first line of `file` ('-': standard input), or asked for without echo when
/// standard input is a terminal. A file that group or others may read is used, with a warning
/// through `warn` (as ssh warns of a private key others can read).
@Sendable func readPassword(_ file: String, prompt: String, warn: (String) -> Void) throws -> [UInt8] {
  if file == "-" && isatty(0) == 1 { return askWithoutEcho(prompt) }
  warnIfOthersCanRead(file, what: "password", warn: warn)
  return try Repository.readPasswordFile(file)
}

/// Warns when the secret file `file` (not '-') may be read by its group or others. Uses
/// `stat(2)`; a file that cannot be stat'ed is left to the read to report.
func warnIfOthersCanRead(_ file: String, what: String, warn: (String) -> Void) {
  var st = stat()
  guard file != "-", stat(file, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_mode & 0o077 != 0 else {
    return
  }
  warn(
    "the \(what) file '\(file)' may be read by others (mode \(String(st.st_mode & 0o777, radix: 8))); "
      + "keep it private: chmod 600 '\(file)'")
}

/// Asks on the terminal with echo off: `write` shows the prompt (default: straight to stderr,
/// for callers without a command context). Uses `tcgetattr(3)` and `tcsetattr(3)`.
func askWithoutEcho(
  _ prompt: String, write: (String) -> Void = { try? FileDescriptor(rawValue: 2).writeAll(Array($0.utf8)) }
) -> [UInt8] {
  write(prompt + ": ")
  var saved = termios()
  let canSilence = tcgetattr(0, &saved) == 0
  if canSilence {
    var silent = saved
    silent.c_lflag &= ~tcflag_t(ECHO)
    tcsetattr(0, TCSANOW, &silent)
  }
  defer {
    if canSilence { tcsetattr(0, TCSANOW, &saved) }
    write("\n")
  }
  var line: [UInt8] = []
  var byte: UInt8 = 0
  while read(0, &byte, 1) == 1 && byte != UInt8(ascii: "\n") { line.append(byte) }
  return line
}
