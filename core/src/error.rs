//! Validation errors that say what is wrong and where: the file, the line
//! and column when the input has them, and the field.
//!
//! Validation collects every problem it can find in one pass, so a user
//! fixes a cohort in one round instead of one error at a time.

use std::fmt;

/// One problem found in one cohort file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file's name within the cohort directory (`cohort.toml`).
    pub file: String,
    /// 1-based line, when the problem has a place in the file.
    pub line: Option<usize>,
    /// 1-based column (in characters), when known.
    pub column: Option<usize>,
    /// The field, as a path (`arms[2].pinned_version`), when there is one.
    pub field: Option<String>,
    /// What is wrong and, where it helps, how to fix it. Lowercase.
    pub message: String,
}

impl Problem {
    /// A problem with a file as a whole (missing, not UTF-8, empty).
    pub fn in_file(file: &str, message: impl Into<String>) -> Self {
        Problem { file: file.to_owned(), line: None, column: None, field: None, message: message.into() }
    }

    /// A problem at a byte offset of `text`, the contents of `file`.
    pub fn at_offset(file: &str, text: &str, offset: usize, message: impl Into<String>) -> Self {
        let (line, column) = line_column(text, offset);
        Problem { file: file.to_owned(), line: Some(line), column: Some(column), field: None, message: message.into() }
    }

    /// Names the field the problem is about.
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        if let Some(field) = &self.field {
            write!(f, ": field `{field}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Every problem found while validating a cohort. Never empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ValidationError {
    /// The problems, in the order the files and their contents were read.
    pub problems: Vec<Problem>,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        write!(f, "the cohort is not valid ({n} problem{}):", if n == 1 { "" } else { "s" })?;
        for problem in &self.problems {
            write!(f, "\n  {problem}")?;
        }
        Ok(())
    }
}

/// The 1-based line and column (in characters) of byte `offset` in `text`.
/// An offset past the end, or inside a character, is clamped.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_column_counts_lines_and_characters() {
        let text = "ab\ncdé\nf";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 3), (2, 1));
        assert_eq!(line_column(text, 7), (2, 4));
        assert_eq!(line_column(text, 6), (2, 3), "inside é clamps to its start");
        assert_eq!(line_column(text, 99), (3, 2));
    }

    #[test]
    fn display_names_file_line_and_field() {
        let p = Problem::at_offset("cohort.toml", "a\nb", 2, "must not be empty").field("arms[0].id");
        assert_eq!(p.to_string(), "cohort.toml:2:1: field `arms[0].id`: must not be empty");
    }
}
