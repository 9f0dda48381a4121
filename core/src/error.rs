//! Validation errors that say what is wrong and where: the file, the line
//! and column when the input has them, and the field.
//!
//! Validation collects every problem it can find in one pass, so a user
//! fixes a cohort in one round instead of one error at a time.

use std::fmt;

use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

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

/// Collects the problems of one TOML file while its raw config is checked:
/// the helpers every config validator of cohort shares (cohort.toml, the
/// judge proxy's config). Validators hold one and deref to it.
#[derive(Debug)]
pub struct TomlChecker<'a> {
    /// The file's name as messages show it.
    pub file: &'a str,
    /// Its text, for line and column numbers.
    pub text: &'a str,
    pub problems: Vec<Problem>,
}

impl<'a> TomlChecker<'a> {
    pub fn new(file: &'a str, text: &'a str) -> TomlChecker<'a> {
        TomlChecker { file, text, problems: Vec::new() }
    }

    /// The problem of a TOML syntax or shape error (unknown field, wrong
    /// type), at its position, naming the field when the error is at a
    /// value written `key = value` ([`toml_field_at`]): the parser's own
    /// message names the type it expected, not the field.
    pub fn parse_error(file: &str, text: &str, e: &toml::de::Error) -> Problem {
        let offset = e.span().map_or(0, |s| s.start);
        let problem = Problem::at_offset(file, text, offset, e.message().trim().to_owned());
        match toml_field_at(text, offset) {
            Some(field) => problem.field(field),
            None => problem,
        }
    }

    /// Records a problem about `field` at the start of `span`.
    pub fn problem(&mut self, span: std::ops::Range<usize>, field: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem::at_offset(self.file, self.text, span.start, message).field(field));
    }

    /// Records a problem about `field` with no position in the file (a
    /// missing table, a value that is not there).
    pub fn whole_file(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem::in_file(self.file, message).field(field));
    }

    /// A whole number that fits `T`, at least `min`; `default` when absent
    /// (and, with a problem recorded, when invalid).
    pub fn int<T: TryFrom<i64>>(&mut self, value: Option<toml::Spanned<i64>>, field: &str, min: i64, default: T) -> T {
        let Some(value) = value else { return default };
        let span = value.span();
        let n = value.into_inner();
        match T::try_from(n) {
            Ok(v) if n >= min => v,
            _ => {
                self.problem(span, field, format!("must be a whole number of at least {min} (got {n})"));
                default
            }
        }
    }

    /// The string, with a problem recorded when it is blank or longer than
    /// [`MAX_TEXT_BYTES`].
    pub fn non_empty(&mut self, value: toml::Spanned<String>, field: &str) -> String {
        self.non_empty_at_most(value, field, MAX_TEXT_BYTES)
    }

    /// [`Self::non_empty`] with its own cap, in bytes.
    pub fn non_empty_at_most(&mut self, value: toml::Spanned<String>, field: &str, max: usize) -> String {
        if value.get_ref().trim().is_empty() {
            self.problem(value.span(), field, "must not be empty");
        } else if value.get_ref().len() > max {
            let len = value.get_ref().len();
            self.problem(value.span(), field, format!("is {len} bytes long; at most {max} are accepted"));
        }
        value.into_inner()
    }
}

/// The longest free text of a cohort's config (a publication field, a
/// model name, a lineage): 16 KiB. Ids, labels and version labels have
/// caps of their own, shorter.
pub const MAX_TEXT_BYTES: usize = 16 * 1024;

/// The field whose value starts at byte `offset` of the TOML `text`, as a
/// path (`judge.batch_size`, `arms[1].concurrency`), when the value is
/// written on its key's line under a `[table]` or `[[array]]` header (or
/// at the top). `None` elsewhere (inside a multi-line array or an inline
/// table): the problem still has its line and column.
pub fn toml_field_at(text: &str, offset: usize) -> Option<String> {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let key = before[line_start..].trim_end().strip_suffix('=')?.trim();
    let plain = |k: &str| {
        !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'"'))
    };
    if !plain(key) {
        return None;
    }
    let key = key.replace('"', "");
    let lines: Vec<&str> = before[..line_start].lines().map(str::trim).collect();
    let Some(header) = lines.iter().rev().find(|l| l.starts_with('[')) else {
        return Some(key);
    };
    if let Some(array) = header.strip_prefix("[[").and_then(|h| h.strip_suffix("]]")) {
        let array = array.trim().replace('"', "");
        let index = lines
            .iter()
            .filter(|l| {
                l.strip_prefix("[[")
                    .and_then(|h| h.strip_suffix("]]"))
                    .is_some_and(|h| h.trim().replace('"', "") == array)
            })
            .count()
            .saturating_sub(1);
        return Some(format!("{array}[{index}].{key}"));
    }
    let table = header.strip_prefix('[')?.strip_suffix(']')?.trim().replace('"', "");
    Some(format!("{table}.{key}"))
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

// === JSON arrays whose elements have lines ===

/// The elements of the JSON array `text` (the contents of `file`), each
/// borrowed as raw JSON with its byte offset, so the checks serde cannot do
/// (duplicate ids, unknown references) still name the element's line. Not
/// an array, or not JSON: the one problem, at its line and column.
pub fn json_elements<'a>(file: &str, text: &'a str) -> Result<Vec<(usize, &'a RawValue)>, Vec<Problem>> {
    let elements: Vec<&RawValue> = serde_json::from_str(text).map_err(|e| vec![json_problem(file, text, 0, &e)])?;
    Ok(elements.into_iter().map(|raw| (offset_in(text, raw.get()), raw)).collect())
}

/// Element `i` of [`json_elements`] (at byte `offset` of `text`) as a `T`,
/// or serde's error placed at its line and column in the whole file and
/// named `[i]`.
pub fn json_element<T: DeserializeOwned>(
    file: &str,
    text: &str,
    i: usize,
    offset: usize,
    raw: &RawValue,
) -> Result<T, Problem> {
    serde_json::from_str(raw.get()).map_err(|e| json_problem(file, text, offset, &e).field(format!("[{i}]")))
}

/// 1-based line numbers of increasing byte offsets, in linear total time
/// (elements come in file order, so validation stays linear in the file's
/// size).
#[derive(Debug, Default)]
pub struct LineCounter {
    offset: usize,
    newlines: usize,
}

impl LineCounter {
    pub fn line_at(&mut self, text: &str, offset: usize) -> usize {
        let offset = offset.min(text.len());
        if offset < self.offset {
            *self = LineCounter::default();
        }
        self.newlines += text.as_bytes()[self.offset..offset].iter().filter(|&&b| b == b'\n').count();
        self.offset = offset;
        self.newlines + 1
    }
}

/// The byte offset of `part` within `whole`; `part` must borrow from it.
fn offset_in(whole: &str, part: &str) -> usize {
    (part.as_ptr() as usize).saturating_sub(whole.as_ptr() as usize).min(whole.len())
}

/// A serde_json error at a position relative to `base` (the start of the
/// element it was parsed from).
fn json_problem(file: &str, text: &str, base: usize, e: &serde_json::Error) -> Problem {
    // serde_json reports 1-based lines and columns within what it parsed.
    let (base_line, base_col) = line_column(text, base);
    let (line, column) = if e.line() <= 1 {
        (base_line, base_col + e.column().saturating_sub(1))
    } else {
        (base_line + e.line() - 1, e.column())
    };
    let mut message = e.to_string();
    if let Some(at) = message.rfind(" at line ") {
        message.truncate(at);
    }
    Problem { file: file.to_owned(), line: Some(line), column: Some(column.max(1)), field: None, message }
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
