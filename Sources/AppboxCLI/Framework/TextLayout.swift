import Foundation

// Laying text out in a given number of columns: words wrapped, never split; a word longer
// than the line stands alone on its line. Widths count Characters, which is right for
// the ASCII help text is written in.

enum TextLayout {
  /// The width help is laid out in: $COLUMNS when set, else the terminal's width, else 80;
  /// never below 40 (narrower is unreadable) nor above 100 (longer lines are hard to read).
  static func helpWidth(terminal: Int?, environment: [String: String]) -> Int {
    min(100, max(40, environmentColumns(environment) ?? terminal ?? 80))
  }

  /// $COLUMNS, when it is a positive number.
  static func environmentColumns(_ environment: [String: String]) -> Int? {
    environment["COLUMNS"].flatMap(Int.init).flatMap { $0 > 0 ? $0 : nil }
  }

  /// `words` in lines of at most `width` columns, the first starting after `firstIndent`
  /// spaces and the others after `indent`. Returns whole lines, indentation included.
  static func wrap(words: [String], width: Int, indent: Int, firstIndent: Int? = nil) -> [String] {
    var lines: [String] = []
    var current = String(repeating: " ", count: firstIndent ?? indent)
    var empty = true
    let room = max(1, width - indent)
    for word in words.flatMap({ $0.count > room ? pieces(of: $0, room: room) : [$0] }) where !word.isEmpty {
      if !empty && current.count + 1 + word.count > width {
        lines.append(current)
        current = String(repeating: " ", count: indent) + word
      } else {
        current += (empty ? "" : " ") + word
      }
      empty = false
    }
    lines.append(current)
    return lines
  }

  /// A word too long for a line, cut after a '/', '-', '|' or ',' where it can be (a path,
  /// a hyphenated name, a list of choices), else anywhere: pieces of at most `room` columns.
  static func pieces(of word: String, room: Int) -> [String] {
    var pieces: [String] = []
    var rest = Substring(word)
    while rest.count > room {
      let window = rest.prefix(room)
      let cut = window.lastIndex { "/-|,".contains($0) }.map { rest.index(after: $0) } ?? window.endIndex
      pieces.append(String(rest[..<cut]))
      rest = rest[cut...]
    }
    if !rest.isEmpty { pieces.append(String(rest)) }
    return pieces
  }

  /// A paragraph of prose (line breaks inside it are spaces) wrapped to `width`.
  static func wrap(_ text: String, width: Int, indent: Int = 0, firstIndent: Int? = nil) -> [String] {
    wrap(words: words(of: text), width: width, indent: indent, firstIndent: firstIndent)
  }

  /// Prose reflowed: paragraphs (separated by blank lines) wrapped to `width`, a blank line
  /// between them.
  static func reflow(_ text: String, width: Int, indent: Int = 0) -> [String] {
    let paragraphs = text.components(separatedBy: "\n\n").map {
      $0.trimmingCharacters(in: .whitespacesAndNewlines)
    }
    .filter { !$0.isEmpty }
    var lines: [String] = []
    for paragraph in paragraphs {
      if !lines.isEmpty { lines.append("") }
      lines += wrap(paragraph, width: width, indent: indent)
    }
    return lines
  }

  /// A two-column row: `label` indented by 2, `text` wrapped in a column starting at
  /// `column`; a label too wide for its column gets a line of its own.
  static func row(_ label: String, _ text: String, column: Int, width: Int) -> [String] {
    let head = "  " + label
    let words = words(of: text)
    if head.count + 2 <= column {
      var lines = wrap(words: words, width: width, indent: column, firstIndent: column)
      lines[0] = head + String(lines[0].dropFirst(head.count))
      return lines
    }
    return [head] + wrap(words: words, width: width, indent: column)
  }

  /// A command line in `width` columns: after `indent` spaces and `prompt`, its words; when
  /// too long, continued on lines ending in a backslash, as a shell reads it.
  static func commandLine(_ command: String, prompt: String, indent: Int, width: Int) -> [String] {
    let first = String(repeating: " ", count: indent) + prompt
    if first.count + command.count <= width { return [first + command] }
    let continuation = indent + prompt.count + 2
    // An option stays with its value ("--service sync") when the line breaks.
    var units: [String] = []
    for word in shellWords(command) {
      if let last = units.last, last.hasPrefix("--"), !last.contains(" "), !last.contains("="),
        !word.hasPrefix("-"), word != "|"
      {
        units[units.count - 1] += " " + word
      } else {
        units.append(word)
      }
    }
    var lines = wrap(words: units, width: width - 2, indent: continuation, firstIndent: first.count)
    lines[0] = first + String(lines[0].dropFirst(first.count))
    for index in lines.indices.dropLast() { lines[index] += " \\" }
    return lines
  }

  /// Words separated by spaces and line breaks.
  static func words(of text: String) -> [String] {
    text.split(whereSeparator: { $0 == " " || $0 == "\n" }).map(String.init)
  }

  /// A shell command line's words, quotes kept as written (for wrapping, not for running):
  /// spaces inside quotes do not separate.
  static func shellWords(_ command: String) -> [String] {
    var words: [String] = []
    var current = ""
    var quote: Character?
    for character in command {
      if let open = quote {
        current.append(character)
        if character == open { quote = nil }
      } else if character == "\"" || character == "'" {
        quote = character
        current.append(character)
      } else if character == " " {
        if !current.isEmpty { words.append(current) }
        current = ""
      } else {
        current.append(character)
      }
    }
    if !current.isEmpty { words.append(current) }
    return words
  }
}
