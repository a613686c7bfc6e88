import AppboxCore

/// An error of the container layer: bundles, homes, the registry, the device.
public struct ContainerError: AppboxFailure, Equatable {
  public enum Code: Sendable, Equatable {
    /// The bundle is malformed or hostile (exit 65).
    case invalidBundle
    /// The bundle needs a capability the device lacks (exit 65).
    case missingCapability
    /// No installed app matches (exit 66).
    case appNotFound
    /// The app is already installed (exit 73).
    case alreadyInstalled
    /// The bundle's seal does not match its files (exit 65).
    case sealBroken
    /// The app is running (exit 75).
    case appRunning
    /// The device root or its files are unusable (exit 65).
    case invalidDevice
    /// The root holds no device (exit 66): only install and device init create one.
    case noDevice
    /// The request is malformed (exit 64).
    case invalidRequest
    /// The app has not opted in, or the sandbox forbids it (exit 77).
    case denied
    /// A facility is missing, such as Landlock (exit 69).
    case unavailable
    /// No such file inside the app (exit 66).
    case fileNotFound
    /// No such key in the app's preferences (exit 66).
    case keyNotFound
    /// A file the app controls, such as its preferences, is malformed (exit 65).
    case invalidData
    /// It exists already, such as a passcode being set (exit 73).
    case alreadyExists
    /// The passcode is wrong (exit 77).
    case wrongPasscode
    /// Not allowed right now, such as unlocking during the delay after failed attempts (exit 75).
    case tryLater
  }

  public var code: Code
  public var message: String

  public init(_ code: Code, _ message: String) {
    self.code = code
    self.message = message
  }

  public var kind: FailureKind {
    switch code {
    case .invalidBundle, .missingCapability, .sealBroken, .invalidDevice, .invalidData: return .badData
    case .appNotFound, .fileNotFound, .keyNotFound, .noDevice: return .notFound
    case .alreadyInstalled, .alreadyExists: return .cannotCreate
    case .appRunning, .tryLater: return .busy
    case .invalidRequest: return .invalidArgument
    case .denied, .wrongPasscode: return .denied
    case .unavailable: return .unavailable
    }
  }

  public var description: String { message }
}
