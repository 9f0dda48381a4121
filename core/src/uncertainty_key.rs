//! `uncertainty_key.json`, the answerability and uncertainty key of seed 004
//! ("Metrics and denominators", uncertainty handling): before collection an
//! independent subject reviewer freezes, per question, whether it is
//! answerable, the caveats an answer must carry, the known disputes and the
//! sources behind them. Human reviewers score each output's uncertainty
//! handling (0/1/2) against it.
//!
//! The file is optional: a cohort without it freezes exactly as before (same
//! manifest fields and hashes). When present it is frozen with the other
//! five files, so it cannot be written after the outputs are seen.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::error::{LineCounter, Problem, json_element, json_elements};

/// The file name of the key within a cohort directory.
pub const FILE: &str = "uncertainty_key.json";

/// The key's entry for one question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UncertaintyEntry {
    pub question_id: String,
    /// Whether the question can be answered from public evidence; `false`
    /// marks an insufficient-evidence question, where an abstention is the
    /// calibrated answer.
    pub answerable: bool,
    /// Caveats a calibrated answer states (an omitted one scores 1 at best).
    #[serde(default)]
    pub required_caveats: Vec<String>,
    /// Genuine disputes an answer must represent, not resolve (a non-empty
    /// list marks a disputed question).
    #[serde(default)]
    pub known_disputes: Vec<String>,
    /// Where the key's judgments come from.
    #[serde(default)]
    pub sources: Vec<String>,
}

impl UncertaintyEntry {
    /// Seed 004 reports the insufficient-evidence and disputed questions
    /// apart; this is the group an entry falls in.
    pub fn group(&self) -> &'static str {
        if !self.answerable {
            "insufficient_evidence"
        } else if !self.known_disputes.is_empty() {
            "disputed"
        } else {
            "answerable"
        }
    }
}

/// Parses the key and checks it against the cohort's question ids: every
/// entry names a known question, none twice, and the text fields are not
/// blank. Every problem names the file, the line of the entry and its field.
pub fn parse_and_validate(text: &str, question_ids: &BTreeSet<&str>) -> Result<Vec<UncertaintyEntry>, Vec<Problem>> {
    // Each element is first taken as raw JSON borrowed from `text`, so its
    // byte offset, and so its line, is known for the checks serde cannot do.
    let elements = json_elements(FILE, text)?;
    let mut problems = Vec::new();
    let mut entries = Vec::with_capacity(elements.len());
    let mut first_line_of: HashMap<String, usize> = HashMap::new();
    let mut lines = LineCounter::default();
    for (i, (offset, raw)) in elements.into_iter().enumerate() {
        let at = |message: String, field: &str| {
            Problem::at_offset(FILE, text, offset, message).field(format!("[{i}].{field}"))
        };
        let entry: UncertaintyEntry = match json_element(FILE, text, i, offset, raw) {
            Ok(e) => e,
            Err(p) => {
                problems.push(p);
                continue;
            }
        };
        let line = lines.line_at(text, offset);
        if !question_ids.contains(entry.question_id.as_str()) {
            problems.push(at(
                format!(
                    "unknown question id \"{}\": the key may only name questions of questions.json",
                    entry.question_id
                ),
                "question_id",
            ));
        } else if let Some(first) = first_line_of.get(&entry.question_id) {
            problems.push(at(
                format!(
                    "duplicate entry for question \"{}\" (first at line {first}): give one entry per question",
                    entry.question_id
                ),
                "question_id",
            ));
        } else {
            first_line_of.insert(entry.question_id.clone(), line);
        }
        for (field, list) in [
            ("required_caveats", &entry.required_caveats),
            ("known_disputes", &entry.known_disputes),
            ("sources", &entry.sources),
        ] {
            if let Some(j) = list.iter().position(|s| s.trim().is_empty()) {
                problems.push(at(format!("entry {j} is blank: remove it or write it out"), &format!("{field}[{j}]")));
            }
        }
        entries.push(entry);
    }
    if problems.is_empty() { Ok(entries) } else { Err(problems) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> BTreeSet<&'static str> {
        ["s1", "s2"].into_iter().collect()
    }

    #[test]
    fn a_valid_key_parses_with_groups() {
        let text = r#"[
  {"question_id": "s1", "answerable": false, "required_caveats": ["no record exists"]},
  {"question_id": "s2", "answerable": true, "known_disputes": ["impact vs no impact"], "sources": ["doi:1"]}
]"#;
        let key = parse_and_validate(text, &ids()).unwrap();
        assert_eq!(key.len(), 2);
        assert_eq!(key[0].group(), "insufficient_evidence");
        assert_eq!(key[1].group(), "disputed");
    }

    #[test]
    fn unknown_and_duplicate_ids_name_the_line_and_field() {
        let text = "[\n{\"question_id\": \"s1\", \"answerable\": true},\n{\"question_id\": \"zz\", \"answerable\": true},\n{\"question_id\": \"s1\", \"answerable\": true, \"sources\": [\" \"]}\n]";
        let problems = parse_and_validate(text, &ids()).unwrap_err();
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert!(text.iter().any(|p| p.starts_with("uncertainty_key.json:3:1: field `[1].question_id`: unknown question id \"zz\"")), "{text:?}");
        assert!(
            text.iter().any(|p| p.starts_with("uncertainty_key.json:4:1: field `[2].question_id`: duplicate")
                && p.contains("line 2")),
            "{text:?}"
        );
        assert!(text.iter().any(|p| p.contains("`[2].sources[0]`")), "{text:?}");
    }

    #[test]
    fn a_missing_field_is_a_problem_at_its_entry() {
        let problems = parse_and_validate("[\n{\"question_id\": \"s1\"}\n]", &ids()).unwrap_err();
        assert_eq!(problems[0].line, Some(2), "{problems:?}");
        assert!(problems[0].message.contains("answerable"), "{problems:?}");
    }
}
