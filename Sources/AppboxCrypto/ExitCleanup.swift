import COpenSSL

/// OpenSSL's clean-up at exit, which appbox turns off.
///
/// By default OpenSSL 3 registers an `atexit` handler (`OPENSSL_cleanup`) that frees its global
/// state, thread-local state included, and expects no other thread to be running then. appbox
/// exits while threads may still be ending (the keychain broker's, the one that waits for
/// pasta), and OpenSSL frees a thread's own state as that thread ends: the two frees can meet,
/// and the process aborts with "double free or corruption" after its work is done (one CI run of
/// the README tour, `appbox run APP -- appbox-secitem get`). The memory goes with the process
/// anyway, so nothing is lost by not cleaning up.
public enum OpenSSLExitCleanup {
  /// Turns the handler off. Call first in `main`, before anything uses libcrypto: the first
  /// initialisation decides whether the handler is registered.
  /// Uses `OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT)`.
  public static func disable() {
    _ = OPENSSL_init_crypto(UInt64(OPENSSL_INIT_NO_ATEXIT), nil)
  }
}
