//! Label files: the `item_id,label` CSV that `cohort calibrate` (gold
//! labels and judges' verdicts, seed 002) and `cohort review agreement`
//! (two raters' labels, seed 004) read (docs/calibration.md).
//!
//! The text is read by [`crate::csv::records`], the one CSV reader of the
//! result side, so quoted fields may hold commas, doubled quotes and line
//! breaks, and a row's line is the line it starts on. Bad input (an
//! unreadable file, a missing header, an unknown label, a duplicate item
//! id) is a [`LabelFileError`] naming the file, the line and the column.

use std::collections::HashMap;
use std::path::Path;

use crate::review::CLAIM_LABELS;

/// The header every label file starts with.
pub const HEADER: &str = "item_id,label";
/// Seed 004's uncertainty scores, ordinal.
pub const UNCERTAINTY_LABELS: [&str; 3] = ["0", "1", "2"];

/// Bad input: the message names the file, the line and the column.
#[derive(Debug, thiserror::Error)]
pub enum LabelFileError {
    #[error("cannot read {file}: {source}; check the path")]
    Read { file: String, source: std::io::Error },
    #[error("{file}: not UTF-8 text; save it as UTF-8 CSV")]
    Encoding { file: String },
    #[error("{file}:{line}:{column}: {message}")]
    Csv { file: String, line: usize, column: usize, message: String },
    #[error("{file}:{line}: missing header: the first line must be `{HEADER}`, found `{found}`")]
    Header { file: String, line: usize, found: String },
    #[error("{file}:{line}: expected 2 columns (item_id,label), found {found}; quote a value that contains a comma")]
    Columns { file: String, line: usize, found: usize },
    #[error("{file}:{line}: column 1 (item_id): empty item id; give every row an id")]
    EmptyId { file: String, line: usize },
    #[error(
        "{file}:{line}: column 1 (item_id): duplicate item id `{id}` (first on line {first}); give each item one label"
    )]
    Duplicate { file: String, line: usize, id: String, first: usize },
    #[error("{file}:{line}: column 2 (label): unknown label `{label}`; use pass or fail (also yes or no)")]
    Verdict { file: String, line: usize, label: String },
    #[error("{file}:{line}: column 2 (label): empty label; give every item a label")]
    EmptyLabel { file: String, line: usize },
    #[error("{file}: no items after the header; give one `item_id,label` row per item")]
    Empty { file: String },
}

/// One label file: rows in file order, each with its line.
#[derive(Debug)]
pub struct LabelFile {
    /// The file as named in messages.
    pub file: String,
    pub rows: Vec<LabelRow>,
    /// Item id -> index into `rows`.
    pub index: HashMap<String, usize>,
}

/// One item's label.
#[derive(Debug)]
pub struct LabelRow {
    /// Trimmed.
    pub id: String,
    /// Trimmed, as written (case kept).
    pub label: String,
    /// The 1-based line the row starts on.
    pub line: usize,
}

impl LabelFile {
    pub fn read(path: &Path) -> Result<LabelFile, LabelFileError> {
        let file = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| LabelFileError::Read { file: file.clone(), source })?;
        let text = String::from_utf8(bytes).map_err(|_| LabelFileError::Encoding { file: file.clone() })?;
        LabelFile::parse(file, &text)
    }

    /// Parses `item_id,label` CSV: [`crate::csv::records`] (RFC 4180
    /// quoting, line breaks in quoted fields, CRLF, a UTF-8 byte-order
    /// mark), blank lines skipped, the first other line the header.
    pub fn parse(file: String, text: &str) -> Result<LabelFile, LabelFileError> {
        let records = crate::csv::records(text).map_err(|(line, column, message)| LabelFileError::Csv {
            file: file.clone(),
            line,
            column,
            message,
        })?;
        let mut records = records.into_iter().filter(|(_, r)| !(r.len() == 1 && r[0].trim().is_empty()));
        match records.next() {
            Some((line, fields)) => {
                let names: Vec<String> = fields.iter().map(|f| f.trim().to_ascii_lowercase()).collect();
                if names != ["item_id", "label"] {
                    return Err(LabelFileError::Header { file, line, found: fields.join(",") });
                }
            }
            None => return Err(LabelFileError::Header { file, line: 1, found: String::new() }),
        }
        let mut rows = Vec::new();
        let mut index = HashMap::new();
        for (line, fields) in records {
            let [id, label] = fields.as_slice() else {
                return Err(LabelFileError::Columns { file, line, found: fields.len() });
            };
            let (id, label) = (id.trim(), label.trim());
            if id.is_empty() {
                return Err(LabelFileError::EmptyId { file, line });
            }
            if label.is_empty() {
                return Err(LabelFileError::EmptyLabel { file, line });
            }
            if let Some(&first) = index.get(id) {
                let first = rows.get(first).map_or(0, |r: &LabelRow| r.line);
                return Err(LabelFileError::Duplicate { file, line, id: id.to_owned(), first });
            }
            index.insert(id.to_owned(), rows.len());
            rows.push(LabelRow { id: id.to_owned(), label: label.to_owned(), line });
        }
        if rows.is_empty() {
            return Err(LabelFileError::Empty { file });
        }
        Ok(LabelFile { file, rows, index })
    }

    /// The rows as pass/fail verdicts (pass or yes: true; fail or no:
    /// false; any case).
    pub fn verdicts(&self) -> Result<Vec<(String, bool)>, LabelFileError> {
        self.rows
            .iter()
            .map(|r| match r.label.to_ascii_lowercase().as_str() {
                "pass" | "yes" => Ok((r.id.clone(), true)),
                "fail" | "no" => Ok((r.id.clone(), false)),
                _ => Err(LabelFileError::Verdict { file: self.file.clone(), line: r.line, label: r.label.clone() }),
            })
            .collect()
    }
}

/// The matrix order of a label set: seed 004's five claim labels in their
/// order, the 0/1/2 uncertainty scores, integers in numeric order, or else
/// the labels sorted.
pub fn label_order(seen: &[&str]) -> Vec<String> {
    let lower: Vec<String> = seen.iter().map(|l| l.to_ascii_lowercase()).collect();
    if lower.iter().all(|l| CLAIM_LABELS.contains(&l.as_str())) {
        return CLAIM_LABELS.iter().map(|l| (*l).to_owned()).collect();
    }
    if seen.iter().all(|l| UNCERTAINTY_LABELS.contains(l)) {
        return UNCERTAINTY_LABELS.iter().map(|l| (*l).to_owned()).collect();
    }
    let mut distinct: Vec<String> = seen.iter().map(|l| (*l).to_owned()).collect();
    distinct.sort();
    distinct.dedup();
    let numbers: Option<Vec<i64>> = distinct.iter().map(|l| l.parse().ok()).collect();
    if let Some(mut numbers) = numbers {
        numbers.sort_unstable();
        numbers.dedup();
        // Distinct strings may parse to one number ("1", "01"): keep sorted strings then.
        if numbers.len() == distinct.len() {
            return numbers.iter().map(i64::to_string).collect();
        }
    }
    distinct
}

/// A label's key in the order of [`label_order`] (claim labels any case).
pub fn label_key(label: &str, order: &[String]) -> String {
    let lower = label.to_ascii_lowercase();
    if order.len() == CLAIM_LABELS.len() && order.iter().zip(CLAIM_LABELS).all(|(a, b)| a == b) {
        return lower;
    }
    label.parse::<i64>().map(|n| n.to_string()).ok().filter(|n| order.contains(n)).unwrap_or_else(|| label.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<LabelFile, LabelFileError> {
        LabelFile::parse("f.csv".into(), text)
    }

    #[test]
    fn csv_errors_name_file_line_and_column() {
        let e = parse("id,label\na,pass\n").unwrap_err().to_string();
        assert!(e.starts_with("f.csv:1: missing header"), "{e}");
        let e = parse("item_id,label\na,pass\n\nb,maybe\n").unwrap().verdicts().unwrap_err().to_string();
        assert!(e.starts_with("f.csv:4: column 2 (label): unknown label `maybe`"), "{e}");
        let e = parse("item_id,label\na,pass\na,fail\n").unwrap_err().to_string();
        assert!(e.contains("f.csv:3: column 1 (item_id): duplicate item id `a` (first on line 2)"), "{e}");
        let e = parse("item_id,label\na,pass,x\n").unwrap_err().to_string();
        assert!(e.starts_with("f.csv:2: expected 2 columns"), "{e}");
        assert!(matches!(parse("item_id,label\n"), Err(LabelFileError::Empty { .. })));
        assert!(matches!(parse(""), Err(LabelFileError::Header { line: 1, .. })));
        let e = parse("item_id,label\na,pa\"ss\n").unwrap_err().to_string();
        assert_eq!(e, "f.csv:2:5: a quote inside an unquoted field: quote the whole field and double its quotes");
    }

    #[test]
    fn csv_accepts_quotes_bom_crlf_and_yes_no() {
        let f = parse("\u{feff}item_id,label\r\n\"a,1\",YES\r\n b , No \r\n\"c\"\"q\",pass\n d, \"fail\"\n").unwrap();
        let v = f.verdicts().unwrap();
        assert_eq!(v, vec![("a,1".into(), true), ("b".into(), false), ("c\"q".into(), true), ("d".into(), false)]);
        let e = parse("item_id,label\n\"a,pass\n").unwrap_err().to_string();
        assert_eq!(e, "f.csv:2:1: a quoted field is never closed: add the closing quote");
    }

    /// A quoted field may hold a line break (report::csv's rule, as for
    /// review files): the item keeps it, and later rows keep their own
    /// line numbers. The line-by-line reader before it called this an
    /// unterminated quote.
    #[test]
    fn a_quoted_field_may_span_lines() {
        let f = parse("item_id,label\n\"claim 1\nsecond line\",pass\nb,fail\n").unwrap();
        assert_eq!(f.rows[0].id, "claim 1\nsecond line");
        assert_eq!((f.rows[0].line, f.rows[1].line), (2, 4));
        let e = parse("item_id,label\n\"claim 1\nsecond line\",pass\nb,maybe\n").unwrap().verdicts().unwrap_err();
        assert!(e.to_string().starts_with("f.csv:4: column 2 (label)"), "{e}");
    }

    #[test]
    fn label_order_follows_seed_004_then_numbers_then_sorted() {
        assert_eq!(label_order(&["unsupported", "Fully_Supported"]), CLAIM_LABELS.map(String::from).to_vec());
        assert_eq!(label_order(&["2", "0"]), vec!["0", "1", "2"]);
        assert_eq!(label_order(&["10", "9", "3"]), vec!["3", "9", "10"]);
        assert_eq!(label_order(&["b", "a", "b"]), vec!["a", "b"]);
    }
}
