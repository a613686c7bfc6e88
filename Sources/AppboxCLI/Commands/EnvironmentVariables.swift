// The environment variables help pages list, each described once here (docs/environment.md
// describes every variable appbox reads, test hooks included). A command lists those it
// reads in its description; an option lists those its default comes from.

extension EnvironmentVariable {
  static let root = EnvironmentVariable("APPBOX_ROOT", "The device root when --root is not given.")
  static let xdgDataHome = EnvironmentVariable(
    "XDG_DATA_HOME", "Without --root and APPBOX_ROOT, the device root is $XDG_DATA_HOME/appbox.")
  static let home = EnvironmentVariable(
    "HOME", "Without XDG_DATA_HOME either, the device root is $HOME/.local/share/appbox.")
  static let lockTimeout = EnvironmentVariable(
    "APPBOX_LOCK_TIMEOUT", "Seconds to wait for a lock another appbox holds (--wait sets it).")
  static let passwordFile = EnvironmentVariable(
    "APPBOX_PASSWORD_FILE", "The file whose first line is an encrypted repository's password.")
  static let s3Endpoint = EnvironmentVariable(
    "APPBOX_S3_ENDPOINT", "The S3 store of an s3:// repository when --endpoint is not given.")
  static let s3Region = EnvironmentVariable(
    "APPBOX_S3_REGION", "The S3 region requests are signed for when --region is not given.")
  static let s3CAFile = EnvironmentVariable(
    "APPBOX_S3_CA_FILE", "Certificate authorities to check an https endpoint against.")
  static let s3Attempts = EnvironmentVariable(
    "APPBOX_S3_ATTEMPTS", "How many times a request that failed transiently is sent in all (default 5).")
  static let accessKey = EnvironmentVariable(
    "AWS_ACCESS_KEY_ID", "The S3 access key when --credentials-file is not given.")
  static let secretKey = EnvironmentVariable(
    "AWS_SECRET_ACCESS_KEY", "The S3 secret key when --credentials-file is not given.")
  static let keyCache = EnvironmentVariable(
    "APPBOX_REPOSITORY_KEY_CACHE", "0: keep no unlocked copy of an encrypted repository's key on the device.")
  static let pruneGrace = EnvironmentVariable(
    "APPBOX_PRUNE_GRACE",
    "Seconds an archive marked for deletion in a shared repository stays (default 3600).")
  static let lockSettle = EnvironmentVariable(
    "APPBOX_S3_LOCK_SETTLE", "Seconds forget waits after writing its S3 lock object (default 1).")
  static let lockStale = EnvironmentVariable(
    "APPBOX_S3_LOCK_STALE", "Seconds after which an unrefreshed S3 lock object is dead (default 600).")
  static let importMaxEntries = EnvironmentVariable(
    "APPBOX_IMPORT_MAX_ENTRIES", "The default of --max-members (1000000).")
  static let importMaxBytes = EnvironmentVariable(
    "APPBOX_IMPORT_MAX_BYTES", "The default of --max-size, in bytes (64 GiB).")
  static let cgroup = EnvironmentVariable(
    "APPBOX_CGROUP", "A delegated cgroup v2 directory: each run gets pids.max and memory.max under it.")
  static let sandboxHelper = EnvironmentVariable(
    "APPBOX_SANDBOX_HELPER", "The confinement helper, instead of appbox-sandbox beside appbox.")
  static let secItemTool = EnvironmentVariable(
    "APPBOX_SECITEM_TOOL", "The in-app keychain command, instead of appbox-secitem beside appbox.")
  static let path = EnvironmentVariable("PATH", "Where bwrap is looked up (default /usr/bin:/bin).")
  static let progressInterval = EnvironmentVariable(
    "APPBOX_PROGRESS_INTERVAL",
    "Seconds between progress lines when stderr is not a terminal (default 5) and between "
      + "--json-progress status lines (default 1).")
  static let trace = EnvironmentVariable(
    "APPBOX_TRACE", "1: print every engine event on stderr with the milliseconds since the first.")
  static let columns = EnvironmentVariable(
    "COLUMNS", "The width help pages and the progress line fit, instead of the terminal's (else 80).")

  /// What reaching a repository reads: S3 settings and credentials, the password, the key cache.
  static let repository: [EnvironmentVariable] = [s3CAFile, s3Attempts, keyCache]
  /// What commands that show progress read.
  static let progress: [EnvironmentVariable] = [progressInterval, trace]
  /// What `run` and `launch` read.
  static let sandbox: [EnvironmentVariable] = [path, cgroup, sandboxHelper, secItemTool]
}
