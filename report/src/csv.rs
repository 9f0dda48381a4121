//! CSV (RFC 4180) as cohort's result side writes and reads it: one writer
//! for every CSV file a report or a review export writes (`runs.csv`,
//! `items.csv`), and one reader of records with the line each starts on,
//! so a bad file's error names its line and column. Quoting: a field is
//! quoted only when it holds a comma, a quote or a line break, its quotes
//! doubled; `\n` ends a record. Every CSV file cohort reads goes through
//! [`records`]: review imports (`review::table`) and the label files of
//! `cohort calibrate` and `cohort review agreement` (`labels`).

/// Why a text could not be read as CSV: (line, column, message), 1-based.
pub type CsvError = (usize, usize, String);

/// Writes one CSV field, quoted only when it has to be.
pub fn field(out: &mut String, value: &str) {
    if value.contains([',', '"', '\n', '\r']) {
        out.push('"');
        out.push_str(&value.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(value);
    }
}

/// Writes one CSV record (CRLF-free: `\n` ends a record).
pub fn record<S: AsRef<str>>(out: &mut String, fields: &[S]) {
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        field(out, f.as_ref());
    }
    out.push('\n');
}

/// The records of `text`, each with the 1-based line it starts on. Quoted
/// fields may hold commas, quotes (doubled) and line breaks; a quote may
/// only open a field (spaces or tabs before it are dropped, as in
/// `a, "b"`, which spreadsheets and people write); `\r\n` ends a record
/// like `\n`; a UTF-8 byte-order mark is skipped. Blank lines come back as
/// records of one empty field (the caller decides whether they count).
pub fn records(text: &str) -> Result<Vec<(usize, Vec<String>)>, CsvError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut records: Vec<(usize, Vec<String>)> = Vec::new();
    let mut field = String::new();
    let mut record: Vec<String> = Vec::new();
    let (mut line, mut col, mut start_line) = (1usize, 1usize, 1usize);
    let mut in_quotes = false;
    let mut quote_line = (0, 0);
    let mut chars = text.chars().peekable();
    let mut at_field_start = true;
    // Whether the field being read was quoted (a second quote cannot open it).
    let mut was_quoted = false;
    while let Some(c) = chars.next() {
        if in_quotes {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                    col += 2;
                    continue;
                }
                '"' => in_quotes = false,
                '\n' => {
                    field.push('\n');
                    line += 1;
                    col = 0;
                }
                _ => field.push(c),
            }
            col += 1;
            continue;
        }
        match c {
            '"' if at_field_start || (!was_quoted && field.chars().all(|c| c == ' ' || c == '\t')) => {
                field.clear();
                in_quotes = true;
                was_quoted = true;
                quote_line = (line, col);
            }
            '"' => {
                return Err((
                    line,
                    col,
                    "a quote inside an unquoted field: quote the whole field and double its quotes".into(),
                ));
            }
            ',' => {
                record.push(std::mem::take(&mut field));
                at_field_start = true;
                was_quoted = false;
                col += 1;
                continue;
            }
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' => {
                record.push(std::mem::take(&mut field));
                records.push((start_line, std::mem::take(&mut record)));
                line += 1;
                col = 1;
                start_line = line;
                at_field_start = true;
                was_quoted = false;
                continue;
            }
            _ => field.push(c),
        }
        at_field_start = false;
        col += 1;
    }
    if in_quotes {
        return Err((quote_line.0, quote_line.1, "a quoted field is never closed: add the closing quote".into()));
    }
    if !field.is_empty() || !record.is_empty() {
        record.push(field);
        records.push((start_line, record));
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spaces before an opening quote are dropped; a second quote cannot
    /// reopen a quoted field.
    #[test]
    fn spaces_before_an_opening_quote_are_dropped() {
        let got = records("a, \"b,c\"\t,\t\"d\"\n").unwrap();
        assert_eq!(got[0].1, ["a", "b,c\t", "d"]);
        assert_eq!(records("\"\" \"x\"\n").unwrap_err().1, 4, "no second opening quote");
    }

    #[test]
    fn csv_fields_are_quoted_only_when_needed() {
        let mut s = String::new();
        field(&mut s, "plain");
        s.push('|');
        field(&mut s, "a,b \"c\"\nd");
        assert_eq!(s, "plain|\"a,b \"\"c\"\"\nd\"");
    }

    #[test]
    fn records_keep_their_first_line() {
        let mut out = String::new();
        record(&mut out, &["a", "b"]);
        record(&mut out, &["x, \"y\"".to_owned(), "two\nlines".to_owned()]);
        out.push_str("c,d\r\n");
        let got = records(&out).unwrap();
        let lines: Vec<usize> = got.iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, [1, 2, 4]);
        assert_eq!(got[1].1, ["x, \"y\"", "two\nlines"]);
        assert_eq!(got[2].1, ["c", "d"]);
        assert_eq!(records("a,b\"c\n").unwrap_err().0, 1, "a quote inside an unquoted field");
        assert_eq!(records("a,b\"\"\n").unwrap_err().0, 1, "a quote inside an unquoted field");
        assert_eq!(
            records("a\n\"open\n").unwrap_err(),
            (2, 1, "a quoted field is never closed: add the closing quote".into())
        );
    }
}
