import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Synchronization
import Testing

/// The app's network, from inside the jail, as root and unprivileged: by default a namespace
/// of its own that reaches the outside through pasta but not the host's loopback, its
/// sockets or the hypervisor; `--network host` is the explicit way back to the host's.
struct NetworkTests {
  /// The host's loopback service cannot be reached by default, neither at 127.0.0.1 nor
  /// through the gateway's address (pasta maps it to the host's loopback unless told not
  /// to); with --network host it can, and --network none has nothing at all.
  @Test(arguments: Privilege.testable)
  func theHostsLoopbackIsUnreachableUnlessTheNetworkIsTheHosts(_ privilege: Privilege) throws {
    let device = try HostileDevice(privilege)
    try device.installHostile()
    let service = try TCPService(address: "127.0.0.1")
    #expect(service.answers(), "the control: the service answers on the host")
    let port = String(service.port)
    #expect(try device.attack(["connect-tcp", port], options: ["--network", "host"])["connect-tcp"] == "ok")
    let own = try device.attack(["connect-tcp", port])
    #expect(own["connect-tcp"] == "ECONNREFUSED", "\(own)")
    if let gateway = defaultGateway() {
      let through = try device.attack(["connect-tcp-to", gateway, port])
      #expect(
        through["connect-tcp-to"] != nil && through["connect-tcp-to"] != "ok", "via \(gateway): \(through)")
    }
    let none = try device.attack(["connect-tcp", port], options: ["--network", "none"])
    #expect(none["connect-tcp"] == "ECONNREFUSED", "\(none)")
  }

  /// /proc/net/unix lists the sockets of the app's own namespace: no host socket by default
  /// or with --network none, the host's with --network host (the control).
  @Test(arguments: Privilege.testable)
  func procNetUnixShowsNoHostSocket(_ privilege: Privilege) throws {
    let device = try HostileDevice(privilege)
    try device.installHostile()
    let path = device.dir.url("outside/listening-\(UUID().uuidString.prefix(8)).sock")
    let host = try HostSocket(path: path)
    defer { withExtendedLifetime(host) {} }
    let shared = try device.attack(["proc-net-unix", path], options: ["--network", "host"])
    #expect(shared["proc-net-unix"] == "listed", "\(shared)")
    for options in [[], ["--network", "none"]] {
      let report = try device.attack(["proc-net-unix", path], options: options)
      #expect(report["proc-net-unix"] == "absent", "\(options): \(report)")
      #expect(report["proc-net-unix-sockets"] == "0", "\(options): \(report)")
    }
  }

  /// By default the app reaches a service on an address of the host that is not loopback,
  /// as it would reach the outside (this machine may have no internet: the test makes that
  /// address on a veth pair of its own); --network none does not.
  @Test(.enabled(if: geteuid() == 0, "makes a network interface"), arguments: Privilege.testable)
  func outboundConnectionsWorkByDefault(_ privilege: Privilege) throws {
    let device = try HostileDevice(privilege)
    try device.installHostile()
    let interface = try TestInterface()
    let service = try TCPService(address: interface.address)
    #expect(service.answers(), "the control: the service answers on the host")
    let port = String(service.port)
    let own = try device.attack(["connect-tcp-to", interface.address, port])
    #expect(own["connect-tcp-to"] == "ok", "\(own)")
    let none = try device.attack(
      ["connect-tcp-to", interface.address, port], options: ["--network", "none"])
    #expect(none["connect-tcp-to"] == "ENETUNREACH", "\(none)")
  }

  /// AF_VSOCK sockets, which no network namespace contains, are refused under every network.
  @Test(arguments: Privilege.testable)
  func vsockIsRefusedUnderEveryNetwork(_ privilege: Privilege) throws {
    let device = try HostileDevice(privilege)
    try device.installHostile()
    for options in [[], ["--network", "none"], ["--network", "host"]] {
      let report = try device.attack(["vsock"], options: options)
      for label in ["vsock-socket", "vsock-socket-highbits", "vsock-socketpair"] {
        #expect(report[label] == "EPERM", "\(options) \(label): \(report)")
      }
    }
  }

  /// The app's network is up when it first uses it, whatever it does first: one run after
  /// another, the first connection of each (its first act) already goes out.
  @Test(.enabled(if: geteuid() == 0, "makes a network interface"))
  func theNetworkIsUpWhenTheAppFirstUsesIt() throws {
    let device = try HostileDevice(Privilege.testable[0])
    try device.installHostile()
    let interface = try TestInterface()
    let service = try TCPService(address: interface.address)
    for _ in 0..<5 {
      let report = try device.attack(["connect-tcp-to", interface.address, String(service.port)])
      #expect(report["connect-tcp-to"] == "ok", "\(report)")
    }
  }

  /// Without pasta the app is not given the host's network instead: exit 69, one line
  /// naming the package and the two explicit choices; those still work.
  @Test func withoutPastaTheDefaultNetworkIsRefused() throws {
    let device = try HostileDevice(Privilege.testable[0])
    try device.installHostile()
    let bin = try device.dir.makeDirectoryPath("nopasta")
    try FileManager.default.createSymbolicLink(atPath: bin + "/bwrap", withDestinationPath: "/usr/bin/bwrap")
    let environment = ["PATH": bin]
    let refused = try device.appbox(["launch", "com.example.hostile", "--", "id"], environment: environment)
    #expect(refused.status == 69, "\(refused.err)")
    #expect(refused.err.split(separator: "\n").count == 1, "\(refused.err)")
    #expect(
      refused.err.contains("pasta is not installed") && refused.err.contains("'passt'"), "\(refused.err)")
    #expect(refused.err.contains("--network none") && refused.err.contains("--network host"))
    for choice in ["none", "host"] {
      let run = try device.appbox(
        ["launch", "com.example.hostile", "--network", choice, "--", "id"], environment: environment)
      #expect(run.status == 0, "\(choice): \(run.err)")
    }
  }
}

extension NetworkTests {
  /// The app starts without waiting for pasta, and its first socket waits for pasta instead:
  /// with a pasta held back until the app is seen blocked in socket(), the app's connection
  /// (its first act) still goes out once pasta is up.
  @Test(.enabled(if: geteuid() == 0, "makes a network interface, reads the app's /proc/PID/syscall"))
  func theAppsFirstSocketWaitsForPasta() throws {
    let device = try HostileDevice(Privilege.testable[0])
    try device.installHostile()
    let interface = try TestInterface()
    let service = try TCPService(address: interface.address)
    let bin = try device.dir.makeDirectoryPath("slow")
    let go = bin + "/go"
    try installPasta(
      in: bin, script: "while [ ! -e '\(go)' ]; do sleep 0.01; done\nexec /usr/bin/pasta \"$@\"")
    let arguments = ["connect-tcp-to", interface.address, String(service.port)]
    let run = BackgroundRun {
      try device.appbox(
        ["launch", "com.example.hostile", "--"] + arguments, environment: ["PATH": bin + ":/usr/bin:/bin"])
    }
    let held = eventually(within: 60) { hostileProcessesInSocket(running: arguments) }
    #expect(held, "the app did not run, or did not wait in socket(), before pasta started")
    #expect(FileManager.default.createFile(atPath: go, contents: nil))
    let result = try run.wait()
    #expect(result.status == 0, "\(result.err)")
    #expect(parseReport(result.out)["connect-tcp-to"] == "ok", "\(result.out)")
  }

  /// As root, pasta starts at a low priority (the jail's start goes first) and runs at the
  /// usual one once it is ready.
  @Test(.enabled(if: geteuid() == 0, "only root may raise pasta's priority back"))
  func pastaRunsAtTheUsualPriorityOnceReady() throws {
    let device = try HostileDevice(.root)
    try device.installHostile()
    let socket = "/tmp/priority-\(UUID().uuidString.prefix(8)).sock"
    let run = BackgroundRun {
      try device.appbox(["launch", "com.example.hostile", "--", "listen", socket, "5"])
    }
    var niceness: Int?
    let found = eventually(within: 30) {
      guard let appbox = processes(containing: device.root).first(where: { commandName(of: $0) == "appbox" }),
        let pasta = childProcesses(of: appbox).first(where: { commandName(of: $0)?.hasPrefix("pas") == true })
      else { return false }
      niceness = nice(of: pasta)
      return niceness == 0
    }
    #expect(found, "pasta's nice value: \(niceness.map(String.init) ?? "no pasta found")")
    _ = try run.wait()
  }

  /// How pasta fails in `whenPastaFailsTheAppGetsNoNetworkAndTheJailStops`.
  enum PastaFailure: String, CaseIterable, CustomTestStringConvertible, Sendable {
    /// At once, before the app is likely to have started.
    case atOnce
    /// Once the app is seen waiting in socket() (as root only: it reads the app's
    /// /proc/PID/syscall).
    case whileTheAppWaits
    var testDescription: String { rawValue }
  }

  /// When pasta fails before it is ready, the app (which does not wait for pasta to start)
  /// gets no network: its socket() never succeeds (a call held until then fails with
  /// ENETDOWN), the jail is stopped, and appbox exits 69 with one line carrying pasta's own
  /// words; no process of the app outlives appbox.
  @Test(arguments: Privilege.testable, PastaFailure.allCases)
  func whenPastaFailsTheAppGetsNoNetworkAndTheJailStops(_ privilege: Privilege, _ failure: PastaFailure)
    throws
  {
    if failure == .whileTheAppWaits && geteuid() != 0 { return }
    let device = try HostileDevice(privilege)
    let id = try device.installHostile()
    let bin = try device.dir.makeDirectoryPath("failing")
    let go = bin + "/go"
    let wait = failure == .whileTheAppWaits ? "while [ ! -e '\(go)' ]; do sleep 0.01; done\n" : ""
    try installPasta(
      in: bin,
      script: wait + "echo 'Failed to send 40 bytes to syslog' >&2\necho 'no tap for you' >&2\nexit 1")
    let arguments = ["socket-report", device.jailHome(id) + "/Documents/socket"]
    let run = BackgroundRun {
      try device.appbox(
        ["launch", "com.example.hostile", "--"] + arguments, environment: ["PATH": bin + ":/usr/bin:/bin"])
    }
    if failure == .whileTheAppWaits {
      let held = eventually(within: 60) { hostileProcessesInSocket(running: arguments) }
      #expect(held, "the app did not run, or did not wait in socket(), before pasta failed")
      #expect(FileManager.default.createFile(atPath: go, contents: nil))
    }
    let result = try run.wait()
    #expect(result.status == 69, "\(result.err)")
    #expect(result.err.split(separator: "\n").count == 1, "\(result.err)")
    #expect(result.err.contains("pasta failed (no tap for you)"), "\(result.err)")
    #expect(!result.err.contains("syslog"), "\(result.err)")
    // The app's socket never worked: it either did not get to report, or it reports ENETDOWN.
    let report = contents(device.home(id) + "/Documents/socket").map { String(decoding: $0, as: UTF8.self) }
    #expect(report == nil || report == "ENETDOWN\n", "\(report ?? "")")
    #expect(!result.out.contains("socket-report ok"), "\(result.out)")
    #expect(hostileProcesses(running: arguments).isEmpty, "a process of the app outlived appbox")
    #expect(
      try device.appbox(["uninstall", "com.example.hostile"]).status == 0, "nothing of the app is left")
  }

  /// The gate's listener leaves the jail before the app starts: the app holds only its stdio
  /// and the keychain broker's door, under every network.
  @Test(arguments: Privilege.testable)
  func theGatesListenerNeverReachesTheApp(_ privilege: Privilege) throws {
    let device = try HostileDevice(privilege)
    try device.installHostile()
    for options in [[], ["--network", "none"], ["--network", "host"]] {
      let result = try device.appbox(["launch", "com.example.hostile"] + options + ["--", "fd-links"])
      #expect(result.status == 0, "\(options): \(result.err)")
      let descriptors = result.out.split(separator: "\n").filter { $0.hasPrefix("fd ") }
      #expect(
        descriptors.map { $0.split(separator: " ")[1] } == ["0", "1", "2", "3"], "\(options): \(result.out)")
      #expect(!result.out.contains("seccomp"), "\(options): \(result.out)")
    }
  }

  /// Only the app's own network has a gate: by default the app runs under two seccomp filters
  /// and cannot make a seccomp listener of its own (the gate's is above it), while with
  /// --network host or none nothing of the gate is installed (one filter, a listener of its own
  /// is allowed). socket(AF_INET) works in all three.
  @Test(arguments: Privilege.testable)
  func onlyTheAppsOwnNetworkHasAGate(_ privilege: Privilege) throws {
    let device = try HostileDevice(privilege)
    try device.installHostile()
    let own = try device.attack(["network-gate"])
    #expect(own["seccomp-filters"] == "2", "\(own)")
    #expect(own["own-listener"] == "EBUSY", "\(own)")
    #expect(own["socket-inet"] == "ok", "\(own)")
    for choice in ["host", "none"] {
      let report = try device.attack(["network-gate"], options: ["--network", choice])
      #expect(report["seccomp-filters"] == "1", "\(choice): \(report)")
      #expect(report["own-listener"] == "ok", "\(choice): \(report)")
      #expect(report["socket-inet"] == "ok", "\(choice): \(report)")
    }
  }
}

/// Puts a `pasta` running `script` (sh) and a link to bubblewrap in `bin`, the only
/// directory of the PATH a test gives appbox. Written through a close-on-exec descriptor: a
/// child another test spawns meanwhile must not inherit it open for writing (exec would then
/// fail with ETXTBSY).
private func installPasta(in bin: String, script: String) throws {
  try FileManager.default.createSymbolicLink(atPath: bin + "/bwrap", withDestinationPath: "/usr/bin/bwrap")
  let file = try FileDescriptor.open(bin + "/pasta", O_WRONLY | O_CREAT | O_EXCL, mode: 0o755)
  try file.closeAfter { try $0.writeAll(Array(("#!/bin/sh\n" + script + "\n").utf8)) }
  chmod(bin + "/pasta", 0o755)
}

/// The pids of the hostile app's processes run with `arguments` (not appbox's, bubblewrap's
/// or the helper's, whose command lines name them too).
func hostileProcesses(running arguments: [String]) -> [pid_t] {
  let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
  return names.compactMap { name -> pid_t? in
    guard let pid = pid_t(name), let bytes = FileManager.default.contents(atPath: "/proc/\(name)/cmdline")
    else { return nil }
    let argv = bytes.split(separator: 0, omittingEmptySubsequences: false).map {
      String(decoding: $0, as: UTF8.self)
    }
    guard argv.count > arguments.count, argv[0].hasSuffix("/Hostile.app/hostile"),
      Array(argv[1...arguments.count]) == arguments, processExists(pid)
    else { return nil }
    return pid
  }
}

/// Whether a process of the hostile app run with `arguments` is blocked in socket(2), as
/// /proc/PID/syscall shows it (its number first).
func hostileProcessesInSocket(running arguments: [String]) -> Bool {
  #if arch(x86_64)
    let socketCall = "41"
  #else
    let socketCall = "198"  // arm64
  #endif
  return hostileProcesses(running: arguments).contains { pid in
    let text = (try? String(contentsOfFile: "/proc/\(pid)/syscall", encoding: .utf8)) ?? ""
    return text.split(separator: " ").first.map(String.init) == socketCall
  }
}

/// The command name (comm) of process `pid`.
func commandName(of pid: pid_t) -> String? {
  (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8))?.trimmingCharacters(in: .newlines)
}

/// The fields of /proc/PID/stat after the command name (the state is the first).
private func statFields(of pid: pid_t) -> [Substring]? {
  guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
    let close = stat.lastIndex(of: ")")
  else { return nil }
  return stat[stat.index(after: close)...].split(separator: " ")
}

/// The processes whose parent is `pid`.
func childProcesses(of pid: pid_t) -> [pid_t] {
  let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
  return names.compactMap { pid_t($0) }.filter { child in
    statFields(of: child).flatMap { $0.count > 1 ? pid_t($0[1]) : nil } == pid
  }
}

/// The nice value of process `pid`.
func nice(of pid: pid_t) -> Int? {
  statFields(of: pid).flatMap { $0.count > 16 ? Int($0[16]) : nil }
}

/// A command run on a thread of its own, while the test goes on; `wait` returns its result.
final class BackgroundRun: Sendable {
  private let result = Mutex<Result<ProcessResult, any Error>?>(nil)
  private let done = DispatchSemaphore(value: 0)

  init(_ body: @escaping @Sendable () throws -> ProcessResult) {
    Thread.detachNewThread { [self] in
      let outcome = Result { try body() }
      result.withLock { $0 = outcome }
      done.signal()
    }
  }

  func wait() throws -> ProcessResult {
    done.wait()
    return try result.withLock { $0! }.get()
  }
}

/// A TCP service on the host that answers every connection with one byte.
final class TCPService: @unchecked Sendable {
  let fd: Int32
  let port: UInt16
  let address: String

  init(address: String) throws {
    self.address = address
    fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    var one: Int32 = 1
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
    var socketAddress = sockaddr_in()
    socketAddress.sin_family = sa_family_t(AF_INET)
    socketAddress.sin_addr.s_addr = inet_addr(address)
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let fd = self.fd
    let bound = withUnsafePointer(to: &socketAddress) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
    }
    guard bound == 0, listen(fd, 16) == 0 else { throw SystemError("listen on \(address)") }
    _ = withUnsafeMutablePointer(to: &socketAddress) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    port = UInt16(bigEndian: socketAddress.sin_port)
    Thread.detachNewThread {
      while true {
        let client = accept(fd, nil, nil)
        if client < 0 { return }
        _ = write(client, "x", 1)
        close(client)
      }
    }
  }

  /// Whether a host process gets the service's byte (the control).
  func answers() -> Bool {
    let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(client) }
    var socketAddress = sockaddr_in()
    socketAddress.sin_family = sa_family_t(AF_INET)
    socketAddress.sin_addr.s_addr = inet_addr(address)
    socketAddress.sin_port = port.bigEndian
    let connected = withUnsafePointer(to: &socketAddress) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        connect(client, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
      }
    }
    var byte: UInt8 = 0
    return connected == 0 && read(client, &byte, 1) == 1
  }

  deinit {
    shutdown(fd, Int32(SHUT_RDWR))
    close(fd)
  }
}

/// A veth pair of the test's own, one end holding a host address that is not loopback (in
/// 198.18.0.0/15, the benchmarking range), removed when released.
final class TestInterface: @unchecked Sendable {
  let name: String
  let address: String
  nonisolated(unsafe) private static var counter = 0
  private static let lock = NSLock()

  init() throws {
    let number = Self.lock.withLock {
      Self.counter += 1
      return Self.counter
    }
    let unique = (Int(getpid()) * 64 + number) & 0xFFFF
    name = "abx" + String(unique, radix: 16)
    address = "198.18.\(unique >> 8).\(unique & 0xFF)"
    let script = """
      ip link add "$0" type veth peer name "$0p" && ip addr add "$1/32" dev "$0" && \
      ip link set "$0" up && ip link set "$0p" up
      """
    let result = try runProcess("/bin/sh", ["-c", script, name, address])
    guard result.status == 0 else { throw SystemError("make the test interface \(name): \(result.err)") }
  }

  deinit { _ = try? runProcess("/sbin/ip", ["link", "del", name]) }
}

/// The host's default IPv4 gateway, from /proc/net/route.
func defaultGateway() -> String? {
  guard let table = try? String(contentsOfFile: "/proc/net/route", encoding: .utf8) else { return nil }
  for line in table.split(separator: "\n").dropFirst() {
    let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
    guard fields.count > 2, fields[1] == "00000000", let value = UInt32(fields[2], radix: 16), value != 0
    else {
      continue
    }
    return "\(value & 0xFF).\((value >> 8) & 0xFF).\((value >> 16) & 0xFF).\(value >> 24)"
  }
  return nil
}

extension TemporaryDirectory {
  /// Makes `relative` (a directory everyone may enter) and returns its path.
  func makeDirectoryPath(_ relative: String) throws -> String {
    try makeDirectory(relative)
    chmod(url(relative), 0o755)
    return url(relative)
  }
}
