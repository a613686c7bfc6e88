import CSystem

/// The kernel's Landlock support, as the sandbox helper will find it.
public enum Landlock {
  /// The Landlock ABI version the running kernel supports, or 0 when it has none
  /// (not built in, or disabled at boot). Uses `landlock_create_ruleset(2)`.
  public static var abiVersion: Int { Int(appbox_landlock_abi()) }
}
