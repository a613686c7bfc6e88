/// Test vectors are written in hex; this turns one into bytes (spaces allowed, anything else traps).
func hexBytes(_ text: String) -> [UInt8] {
  let digits = text.filter { !$0.isWhitespace }.map { character -> UInt8 in
    guard let value = character.hexDigitValue else { preconditionFailure("not hex: \(character)") }
    return UInt8(value)
  }
  precondition(digits.count.isMultiple(of: 2), "odd number of hex digits")
  return stride(from: 0, to: digits.count, by: 2).map { digits[$0] << 4 | digits[$0 + 1] }
}

/// Random bytes for inputs whose exact value does not matter.
func randomBytes(_ count: Int) -> [UInt8] {
  var generator = SystemRandomNumberGenerator()
  return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
}
