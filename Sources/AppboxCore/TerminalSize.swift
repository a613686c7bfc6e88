import CSystem

extension FileDescriptor {
  /// The width of the terminal this descriptor is, in columns; nil when it is no terminal
  /// or does not know its size. Uses `ioctl(2)` with `TIOCGWINSZ`.
  public var terminalColumns: Int? {
    let columns = appbox_terminal_columns(rawValue)
    return columns > 0 ? Int(columns) : nil
  }
}
