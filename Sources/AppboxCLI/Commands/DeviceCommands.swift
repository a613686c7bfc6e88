import AppboxContainer
import AppboxCore

struct DeviceCommand: CommandGroup {
  static let description = CommandDescription(
    name: "device",
    abstract:
      "Show or create the device identity; set its passcode, lock, unlock, reboot, erase or clone it.",
    subcommands: [
      DeviceShow.self, DeviceInit.self, DevicePasscode.self, DeviceLock.self, DeviceUnlock.self,
      DeviceReboot.self, DeviceErase.self, DeviceClone.self,
    ], defaultSubcommand: "show")
}

func deviceOutput(
  _ identity: DeviceIdentity, root: DeviceRoot, verb: String? = nil, protection: ProtectionStatus? = nil
) -> CommandOutput {
  var text = [
    "UDID:          \(identity.udid)",
    "Name:          \(identity.name)",
    "Capabilities:  \(identity.capabilities.joined(separator: ", "))",
    "Root:          \(root.path)",
  ]
  if let verb { text.insert(verb, at: 0) }
  var json: [(String, JSONValue)] = [
    ("udid", .string(identity.udid)), ("name", .string(identity.name)),
    ("capabilities", .array(identity.capabilities.map(JSONValue.string))), ("root", .string(root.path)),
    ("created", .string(timestamp(identity.created))),
  ]
  if let protection {
    text += protectionLines(protection)
    json += protectionJSON(protection)
  }
  return CommandOutput(text: text.joined(separator: "\n"), json: .object(json))
}

struct DeviceShow: ParsableCommand {
  static let description = CommandDescription(
    name: "show",
    abstract:
      "Print the device's UDID, name, capabilities, passcode and lock state.",
    examples: [
      .init(
        "The device of $APPBOX_ROOT, then of another root:", "appbox device",
        "appbox --root /tmp/ci device show"),
      .init("Its UDID, for a script:", "appbox --json device show | jq -r .udid"),
    ],
    exitStatuses: [.noInput("No device at the root (appbox device init creates one)."), .deviceBusy])
  init(_ arguments: ParsedArguments) throws {}
  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: false)
    return deviceOutput(session.identity, root: session.root, protection: try session.protection.status())
  }
}

struct DeviceInit: ParsableCommand {
  static let description = CommandDescription(
    name: "init",
    abstract:
      "Create the device root, or rename it and set its capabilities (the UDID never changes).",
    options: [
      .init("name", value: "N", help: "The device's name."),
      .init(
        "capabilities", value: "a,b,...",
        help:
          "The device's capabilities, comma-separated (replaces the list; default: a current iPhone's; arm64 implies armv7)."
      ),
    ],
    examples: [
      .init(
        "Create a device with a name, then give it fewer capabilities:",
        "appbox device init --name \"QA iPhone\"", "appbox device init --capabilities arm64,metal")
    ],
    exitStatuses: [.cannotCreate("The device root could not be created."), .deviceBusy])
  let name: String?
  let capabilities: [String]?
  static let createsDevice = true

  init(_ arguments: ParsedArguments) throws {
    name = arguments.value("name")
    if let name, name.trimmingCharacters(in: .whitespaces).isEmpty {
      throw arguments.usage("--name may not be empty")
    }
    capabilities = arguments.value("capabilities").map {
      $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let root = context.deviceRoot
    let existed = try root.identityIfPresent() != nil
    let session = try context.openDevice(mutating: true, creating: true)
    var identity = session.identity
    if let name { identity.name = name }
    if let capabilities {
      identity.capabilities = capabilities
      for unknown in capabilities where !DeviceIdentity.documentedCapabilities.contains(unknown) {
        context.warn("'\(unknown)' is not a capability the platform documents; kept as given")
      }
    }
    if identity != session.identity { try root.saveIdentity(identity) }
    let verb =
      existed ? (identity != session.identity ? "Updated device" : "Device exists") : "Created device"
    return deviceOutput(identity, root: root, verb: verb)
  }
}
