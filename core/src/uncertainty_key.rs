//! `uncertainty_key.json`, the answerability and uncertainty key of seed 004
//! ("Metrics and denominators", uncertainty handling): before collection an
//! independent subject reviewer freezes, per question, whether it is
//! answerable, the caveats an answer must carry, the known disputes and the
//! sources behind them. Human reviewers score each output's uncertainty
//! handling (0/1/2) against it.
//!
//! A cohort that declares human review (`[review]` in `cohort.toml`) must
//! freeze a key with exactly one entry per question
//! ([`check_every_question`], called by `crate::cohort`). Without
//! `[review]` the file is optional: a cohort without it freezes exactly as
//! before (same manifest fields and hashes); when present it is frozen with
//! the other five files, so it cannot be written after the outputs are seen.
//!
//! Abstentions on answerable questions are reported apart from the 0/1/2
//! distribution and mean (seed 004: "to prevent rewarding blanket
//! refusal"): [`treatment`] is the one rule that says which outputs those
//! are.

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
    /// Why the question is (or is not) answerable, in a sentence or two;
    /// shown to reviewers beside the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rationale: Option<String>,
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

/// How one output's uncertainty item enters the review figures
/// ([`treatment`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UncertaintyTreatment {
    /// Its 0/1/2 score counts in the distribution and the mean (and in its
    /// key group's). An abstention on an insufficient-evidence question is
    /// here: there it is the calibrated answer, scored like any other.
    Scored,
    /// An abstention on a question the key calls answerable: reported
    /// apart (a count over the arm's outputs on answerable questions) and
    /// left out of the 0/1/2 distribution and mean, so declining to answer
    /// is never rewarded as calibration.
    AnswerableAbstention,
    /// The question has no entry in the key (only possible in a cohort
    /// without `[review]`): scored, under the group `not_in_key`.
    NotInKey,
}

impl UncertaintyTreatment {
    /// Whether the item's 0/1/2 score goes into the distribution and mean.
    pub fn in_mean(self) -> bool {
        !matches!(self, UncertaintyTreatment::AnswerableAbstention)
    }
}

/// The one rule for an output's uncertainty item: `entry` is the key's
/// entry for its question (`None` when the key has none) and `abstained`
/// the reviewers' `abstained` marks on the item (one per reviewer who
/// labelled it). It is an answerable-question abstention when the key calls
/// the question answerable and every reviewer who labelled the item marked
/// it as an abstention (at least one did); a split between reviewers keeps
/// it scored, as its 0/1/2 score then rests on their labels.
pub fn treatment(entry: Option<&UncertaintyEntry>, abstained: &[bool]) -> UncertaintyTreatment {
    match entry {
        None => UncertaintyTreatment::NotInKey,
        Some(e) if e.answerable && !abstained.is_empty() && abstained.iter().all(|a| *a) => {
            UncertaintyTreatment::AnswerableAbstention
        }
        Some(_) => UncertaintyTreatment::Scored,
    }
}

/// The problems of a key that does not cover every question, for a cohort
/// that declares human review: one problem per question without an entry,
/// naming the file, the field and the question id. (Unknown and duplicate
/// ids are [`parse_and_validate`]'s.)
pub fn check_every_question<'a>(
    entries: &[UncertaintyEntry],
    question_ids: impl IntoIterator<Item = &'a str>,
) -> Vec<Problem> {
    let keyed: BTreeSet<&str> = entries.iter().map(|e| e.question_id.as_str()).collect();
    question_ids
        .into_iter()
        .filter(|id| !keyed.contains(id))
        .map(|id| {
            Problem::in_file(
                FILE,
                format!(
                    "question \"{id}\" has no entry: the cohort declares human review ([review] in cohort.toml), so \
                     the key needs exactly one entry per question of questions.json"
                ),
            )
            .field("question_id")
        })
        .collect()
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
        if entry.rationale.as_deref().is_some_and(|r| r.trim().is_empty()) {
            problems.push(at("is blank: remove it or write it out".to_owned(), "rationale"));
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

    /// Proves the coverage rule of a cohort with `[review]`: every question
    /// without an entry is one problem naming the file, the field and the
    /// question id.
    #[test]
    fn every_question_needs_an_entry_when_review_is_declared() {
        let key =
            parse_and_validate(r#"[{"question_id": "s2", "answerable": true, "rationale": "known"}]"#, &ids()).unwrap();
        assert_eq!(key[0].rationale.as_deref(), Some("known"));
        let problems: Vec<String> = check_every_question(&key, ["s1", "s2"]).iter().map(ToString::to_string).collect();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("uncertainty_key.json: field `question_id`: question \"s1\" has no entry"),
            "{problems:?}"
        );
        assert!(check_every_question(&key, ["s2"]).is_empty());
        let blank = parse_and_validate(r#"[{"question_id": "s1", "answerable": true, "rationale": " "}]"#, &ids());
        assert!(blank.unwrap_err()[0].to_string().contains("`[0].rationale`"));
    }

    /// Proves the abstention rule: an abstention on an answerable question
    /// is reported apart (out of the mean) only when every reviewer who
    /// labelled the output marked it; on an insufficient-evidence question
    /// it is scored; a question outside the key is `not_in_key`.
    #[test]
    fn answerable_abstentions_are_apart_from_the_mean() {
        let answerable = UncertaintyEntry {
            question_id: "s1".into(),
            answerable: true,
            required_caveats: vec![],
            known_disputes: vec![],
            sources: vec![],
            rationale: None,
        };
        let insufficient = UncertaintyEntry { answerable: false, ..answerable.clone() };
        assert_eq!(treatment(Some(&answerable), &[true, true]), UncertaintyTreatment::AnswerableAbstention);
        assert_eq!(treatment(Some(&answerable), &[true]), UncertaintyTreatment::AnswerableAbstention);
        assert_eq!(treatment(Some(&answerable), &[true, false]), UncertaintyTreatment::Scored);
        assert_eq!(treatment(Some(&answerable), &[]), UncertaintyTreatment::Scored);
        assert_eq!(treatment(Some(&insufficient), &[true, true]), UncertaintyTreatment::Scored);
        assert_eq!(treatment(None, &[true, true]), UncertaintyTreatment::NotInKey);
        assert!(!UncertaintyTreatment::AnswerableAbstention.in_mean());
        assert!(UncertaintyTreatment::Scored.in_mean() && UncertaintyTreatment::NotInKey.in_mean());
    }

    #[test]
    fn a_missing_field_is_a_problem_at_its_entry() {
        let problems = parse_and_validate("[\n{\"question_id\": \"s1\"}\n]", &ids()).unwrap_err();
        assert_eq!(problems[0].line, Some(2), "{problems:?}");
        assert!(problems[0].message.contains("answerable"), "{problems:?}");
    }
}
