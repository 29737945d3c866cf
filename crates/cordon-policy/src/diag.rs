//! Diagnostics: a property of the file, with a position, the rule's name, the
//! offending part underlined and what to write instead.

use std::fmt::Write as _;

/// One problem found while loading a policy.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Diagnostic {
    /// The file as the user named it.
    pub file: String,
    /// 1-based line and column of the offending part.
    pub line: usize,
    pub column: usize,
    /// How many columns to underline (at least 1).
    pub width: usize,
    /// The rule this is about, when it is about one.
    pub rule: Option<String>,
    pub message: String,
    /// What to write instead.
    pub help: Option<String>,
    /// The source line, for rendering.
    pub source_line: String,
    /// `error` or `warning`.
    pub severity: Severity,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

impl Diagnostic {
    /// The human rendering: `file:line:col: error: message`, the line, a caret
    /// underline and the help.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let _ = write!(
            s,
            "{}:{}:{}: {sev}: {}",
            self.file, self.line, self.column, self.message
        );
        if let Some(rule) = &self.rule {
            let _ = write!(s, "\n  in rule `{rule}`");
        }
        if !self.source_line.is_empty() {
            let gutter = self.line.to_string().len();
            let _ = write!(
                s,
                "\n {:gutter$} |\n {} | {}",
                "", self.line, self.source_line
            );
            let pad: String = self
                .source_line
                .chars()
                .take(self.column.saturating_sub(1))
                .map(|c| if c == '\t' { '\t' } else { ' ' })
                .collect();
            let _ = write!(
                s,
                "\n {:gutter$} | {pad}{}",
                "",
                "^".repeat(self.width.max(1))
            );
        }
        if let Some(help) = &self.help {
            let _ = write!(s, "\n  help: {help}");
        }
        s
    }
}

/// Every diagnostic of a load, errors and warnings alike.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    /// Whether any diagnostic is an error.
    pub fn has_errors(&self) -> bool {
        self.0.iter().any(|d| d.severity == Severity::Error)
    }

    /// The human rendering of every diagnostic.
    pub fn render(&self) -> String {
        self.0
            .iter()
            .map(Diagnostic::render)
            .collect::<Vec<_>>()
            .join("\n\n")
    }
}

impl std::fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render())
    }
}

impl std::error::Error for Diagnostics {}

/// Maps byte offsets in a file to lines and columns.
pub struct SourceMap<'a> {
    pub name: &'a str,
    pub text: &'a str,
}

impl SourceMap<'_> {
    /// The 1-based line and column of a byte offset, and that line's text.
    pub fn locate(&self, offset: usize) -> (usize, usize, String) {
        let mut offset = offset.min(self.text.len());
        // Offsets come from parsers that count in bytes or in characters;
        // one inside a character points at that character.
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let col = self.text[line_start..offset].chars().count() + 1;
        let line_text = self.text[line_start..]
            .lines()
            .next()
            .unwrap_or_default()
            .to_string();
        (line, col, line_text)
    }

    /// The byte offset of a 1-based line and character column.
    pub fn offset_of(&self, line: usize, col: usize) -> usize {
        let mut off = 0;
        for (i, l) in self.text.split_inclusive('\n').enumerate() {
            if i + 1 == line {
                let extra: usize = l
                    .chars()
                    .take(col.saturating_sub(1))
                    .map(char::len_utf8)
                    .sum();
                return off + extra;
            }
            off += l.len();
        }
        self.text.len()
    }

    /// A diagnostic at a byte range.
    pub fn at(
        &self,
        start: usize,
        end: usize,
        rule: Option<&str>,
        message: impl Into<String>,
        help: Option<String>,
    ) -> Diagnostic {
        let (line, column, source_line) = self.locate(start);
        let end = end.max(start + 1).min(self.text.len().max(start + 1));
        let width = self
            .text
            .get(start..end)
            .map(|s| s.lines().next().unwrap_or_default().chars().count())
            .unwrap_or(1)
            .max(1);
        Diagnostic {
            file: self.name.to_string(),
            line,
            column,
            width,
            rule: rule.map(str::to_string),
            message: message.into(),
            help,
            source_line,
            severity: Severity::Error,
        }
    }
}
