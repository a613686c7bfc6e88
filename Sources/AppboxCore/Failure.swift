/// What kind of failure an error is, independent of the module that raised it.
///
/// Library modules classify their errors with this; only the command-line layer
/// turns a kind into a process exit status.
public enum FailureKind: String, Sendable, Equatable {
  /// The caller asked for something malformed (bad option, bad parameter).
  case invalidArgument
  /// Input data is invalid: bundle, property list, archive, catalog.
  case badData
  /// No such app, snapshot, item or file.
  case notFound
  /// A needed facility is missing or locked (no Landlock, device locked).
  case unavailable
  /// Something cannot be created, usually because it already exists.
  case cannotCreate
  /// Reading or writing failed.
  case io
  /// Another process holds a lock; trying again later may work.
  case busy
  /// The sandbox or an entitlement forbids it.
  case denied
}

/// An error that knows its kind and renders as one line naming what failed and why.
public protocol AppboxFailure: Error, CustomStringConvertible, Sendable {
  var kind: FailureKind { get }
}
