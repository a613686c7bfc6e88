/// A malformed command line. Printed as `Error: …` with a pointer to the command's help; exit 64.
public struct UsageError: Error, CustomStringConvertible, Sendable {
  public var message: String
  /// The command path whose help to point at ("backup", "keychain add").
  public var commandPath: String?
  /// The global options read before the error, when the parser raised it (so `--json` is
  /// honoured for a malformed command line too).
  public var globals: GlobalOptions?
  public init(_ message: String, commandPath: String? = nil) {
    self.message = message
    self.commandPath = commandPath
  }

  /// The command whose page explains the error: "appbox help keychain get", or "appbox help".
  public var helpCommand: String {
    "appbox help" + (commandPath.map { $0.isEmpty ? "" : " " + $0 } ?? "")
  }
  public var description: String { message }
}

/// The arguments of one command after parsing, checked against its description.
public struct ParsedArguments: Sendable {
  public var commandPath: [String]
  public var positionals: [String]
  public var groupPositionals: [String]
  public var values: [String: [String]]
  public var flags: Set<String>
  public var trailing: [String]?

  public init(
    commandPath: [String] = [], positionals: [String] = [], groupPositionals: [String] = [],
    values: [String: [String]] = [:], flags: Set<String> = [], trailing: [String]? = nil
  ) {
    self.commandPath = commandPath
    self.positionals = positionals
    self.groupPositionals = groupPositionals
    self.values = values
    self.flags = flags
    self.trailing = trailing
  }

  /// Whether flag `--name` was given.
  public func flag(_ name: String) -> Bool { flags.contains(name) }

  /// The value of `--name` (the last one when repeated), or nil.
  public func value(_ name: String) -> String? { values[name]?.last }

  /// The value of `--name` converted to an integer, or nil when absent.
  public func integer(_ name: String, range: ClosedRange<Int> = Int.min...Int.max) throws -> Int? {
    guard let text = value(name) else { return nil }
    guard let number = Int(text), range.contains(number) else {
      throw usage(
        "--\(name) takes a whole number\(range.lowerBound > Int.min ? " from \(range.lowerBound)" : ""), not '\(text)'"
      )
    }
    return number
  }

  /// The positional at `index` (counting the command's own positionals), or nil.
  public func positional(_ index: Int) -> String? { index < positionals.count ? positionals[index] : nil }

  /// Positionals from `index` on.
  public func positionals(from index: Int) -> [String] {
    index < positionals.count ? Array(positionals[index...]) : []
  }

  /// A usage error pointing at this command's help.
  public func usage(_ message: String) -> UsageError {
    UsageError(message, commandPath: commandPath.joined(separator: " "))
  }
}
