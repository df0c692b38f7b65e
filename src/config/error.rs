//! Why a configuration was refused: where (file, line, column, field) and what was
//! expected.

use std::fmt;

/// Why a configuration was not loaded, or not applied: the file, the line and column
/// where they are known, the field, and what was wrong or expected.
///
/// Its `Display` reads as a compiler's: `limits.toml:7:9: limits.login.quota: "5 per
/// minute" is not a quota such as "100/min", …`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    origin: String,
    line: Option<usize>,
    column: Option<usize>,
    field: String,
    message: String,
}

impl ConfigError {
    /// An error in `origin` at `field` (a dotted path, empty for the whole file).
    pub(crate) fn new(origin: &str, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            origin: origin.to_owned(),
            line: None,
            column: None,
            field: field.into(),
            message: message.into(),
        }
    }

    /// At 1-based `line` and `column`.
    pub(crate) fn at(mut self, line: usize, column: usize) -> Self {
        self.line = Some(line);
        self.column = Some(column);
        self
    }

    /// At the byte `offset` of `text`.
    pub(crate) fn at_offset(self, text: &str, offset: usize) -> Self {
        let before = &text[..floor_char_boundary(text, offset)];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
        let column = before[line_start..].chars().count() + 1;
        self.at(line, column)
    }

    /// The file's path, or what the text was called when it came from no file.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The line (from 1), where the format reports one: every mistake found while
    /// the file is read has one; a mistake found when the limits are built (a policy
    /// the checks' rules refuse, a change a running limit cannot take) names its field
    /// alone.
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// The column (from 1), with [`line`](Self::line).
    pub fn column(&self) -> Option<usize> {
        self.column
    }

    /// The field, as a dotted path (`limits.login.quota`, `policies.api.checks[1]`);
    /// empty for the file as a whole (a syntax error, an unreadable file).
    pub fn field(&self) -> &str {
        &self.field
    }

    /// What was wrong, and what was expected.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// The largest char boundary at or below `offset`.
fn floor_char_boundary(text: &str, offset: usize) -> usize {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.origin)?;
        if let (Some(line), Some(column)) = (self.line, self.column) {
            write!(f, ":{line}:{column}")?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}
