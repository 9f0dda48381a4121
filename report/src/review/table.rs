//! The two shapes of a review file, CSV (RFC 4180, read by [`crate::csv`])
//! and JSONL (one object per line), read into the same rows of named string
//! cells, each with the line it came from, so every error names file, line
//! and column.

use std::collections::BTreeMap;

use crate::csv;

/// One data row: column name -> cell text, and where it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// 1-based line of the row's first character.
    pub line: usize,
    pub cells: BTreeMap<String, String>,
    /// Column name -> 1-based column number (CSV: field position; JSONL: 1).
    pub columns: BTreeMap<String, usize>,
}

impl Row {
    /// The trimmed cell, empty when absent.
    pub fn get(&self, column: &str) -> &str {
        self.cells.get(column).map_or("", |s| s.trim())
    }

    /// The column number of `column` (1 when unknown).
    pub fn column(&self, column: &str) -> usize {
        self.columns.get(column).copied().unwrap_or(1)
    }
}

/// Why a file could not be read as a table: (line, column, message).
pub type TableError = (usize, usize, String);

/// A labelled table by its file's extension: `csv` is CSV, anything else
/// JSONL (a sheet's `.json` is read by `sheet`, never here).
pub fn parse_by_ext(text: &str, ext: &str) -> Result<(Vec<String>, Vec<Row>), TableError> {
    if ext == "csv" { parse_csv(text) } else { parse_jsonl(text) }
}

/// Parses CSV with a header row. Quoted fields may hold commas, quotes
/// (doubled) and line breaks. A row with another number of fields than the
/// header is an error naming its line.
pub fn parse_csv(text: &str) -> Result<(Vec<String>, Vec<Row>), TableError> {
    let mut records = csv::records(text)?;
    // Blank lines are not rows.
    records.retain(|(_, r)| !(r.len() == 1 && r[0].trim().is_empty()));
    let mut records = records.into_iter();
    let Some((_, header)) = records.next() else {
        return Err((1, 1, "the file is empty: it needs its header row".into()));
    };
    let header: Vec<String> = header.into_iter().map(|h| h.trim().to_owned()).collect();
    let mut rows = Vec::new();
    for (line, fields) in records {
        if fields.len() != header.len() {
            return Err((
                line,
                1,
                format!(
                    "this row has {} fields and the header {}: keep one field per column",
                    fields.len(),
                    header.len()
                ),
            ));
        }
        let columns = header.iter().enumerate().map(|(i, h)| (h.clone(), i + 1)).collect();
        rows.push(Row { line, cells: header.iter().cloned().zip(fields).collect(), columns });
    }
    Ok((header, rows))
}

/// Parses JSONL: one object per non-blank line; strings, numbers and
/// booleans become cell text, null an empty cell.
pub fn parse_jsonl(text: &str) -> Result<(Vec<String>, Vec<Row>), TableError> {
    let mut header: Vec<String> = Vec::new();
    let mut rows = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let value: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(l).map_err(|e| (i + 1, e.column().max(1), format!("not a JSON object: {e}")))?;
        let mut cells = BTreeMap::new();
        for (k, v) in value {
            let text = match v {
                serde_json::Value::Null => String::new(),
                serde_json::Value::String(s) => s,
                serde_json::Value::Bool(b) => b.to_string(),
                serde_json::Value::Number(n) => n.to_string(),
                other => return Err((i + 1, 1, format!("field `{k}` is {other}: give a string, number or boolean"))),
            };
            if !header.contains(&k) {
                header.push(k.clone());
            }
            cells.insert(k, text);
        }
        rows.push(Row { line: i + 1, cells, columns: BTreeMap::new() });
    }
    Ok((header, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_round_trips_quotes_commas_and_line_breaks() {
        let mut out = String::new();
        csv::record(&mut out, &["a", "b"]);
        csv::record(&mut out, &["x, \"y\"", "two\nlines"]);
        csv::record(&mut out, &["plain", ""]);
        let (header, rows) = parse_csv(&out).unwrap();
        assert_eq!(header, ["a", "b"]);
        assert_eq!(rows[0].cells["a"], "x, \"y\"");
        assert_eq!(rows[0].cells["b"], "two\nlines");
        assert_eq!(rows[1].line, 4, "the row after a two-line field starts on line 4");
        assert_eq!(rows[1].column("b"), 2);
    }

    #[test]
    fn csv_errors_name_the_line() {
        assert_eq!(parse_csv("a,b\n1,2,3\n").unwrap_err().0, 2);
        assert_eq!(parse_csv("a,b\n1,\"open\n").unwrap_err().0, 2);
        assert!(parse_csv("").is_err());
    }
}
