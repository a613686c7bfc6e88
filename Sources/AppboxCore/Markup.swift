/// `text` for HTML or XML character data and attribute values: `&`, `<`, `>`, `"` and `'`
/// as entities (the advice page, S3 request bodies).
public func escapeMarkup(_ text: String) -> String {
  var result = ""
  result.reserveCapacity(text.utf8.count)
  for character in text {
    switch character {
    case "&": result += "&amp;"
    case "<": result += "&lt;"
    case ">": result += "&gt;"
    case "\"": result += "&quot;"
    case "'": result += "&#39;"
    default: result.append(character)
    }
  }
  return result
}
