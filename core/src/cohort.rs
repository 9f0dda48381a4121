//! The five files of a cohort directory, validated together, and the
//! sixth, the uncertainty key of seed 004 ([`crate::uncertainty_key`]),
//! frozen with them when present: required, with one entry per question,
//! when `cohort.toml` declares human review (`[review]`), optional
//! otherwise.
//!
//! The caller reads the files (this crate does no I/O) and hands over their
//! bytes; [`CohortFiles::validate`] checks encoding, each file's contents
//! and the rules that span files (categories, ids), and returns every
//! problem at once.

use std::collections::BTreeMap;

use crate::config::{self, CohortConfig};
use crate::error::{Problem, ValidationError};
use crate::hash::sha256_hex;
use crate::order::{RunId, run_order};
use crate::questions::{self, Question};
use crate::uncertainty_key::{self, UncertaintyEntry};

/// The file holding the shared suffix, appended verbatim to every question.
pub const SUFFIX_FILE: &str = "suffix.txt";
/// The frozen protocol text.
pub const PROTOCOL_FILE: &str = "protocol.md";
/// The frozen scoring rubric.
pub const RUBRIC_FILE: &str = "rubric.md";

/// Every file a cohort freezes, in manifest order.
pub const FROZEN_FILES: [&str; 5] = [config::FILE, questions::FILE, SUFFIX_FILE, PROTOCOL_FILE, RUBRIC_FILE];

/// Files a cohort freezes when they are present. A cohort without them
/// freezes exactly as one did before they existed (same manifest fields and
/// hashes), so older frozen cohorts still verify. The uncertainty key is
/// required when the config declares `[review]`.
pub const OPTIONAL_FILES: [&str; 1] = [uncertainty_key::FILE];

/// The raw bytes of a cohort's files; `None` for a missing file.
#[derive(Debug, Clone, Default)]
pub struct CohortFiles {
    /// Keyed by the names of [`FROZEN_FILES`] and [`OPTIONAL_FILES`].
    pub files: BTreeMap<String, Option<Vec<u8>>>,
}

/// A cohort whose files passed validation.
#[derive(Debug, Clone)]
pub struct ValidatedCohort {
    pub config: CohortConfig,
    pub questions: Vec<Question>,
    /// The shared suffix as the prompt uses it (see [`prompt`]).
    pub suffix: String,
    /// File name -> lowercase hex SHA-256 of its bytes, for the five files
    /// and each optional file present.
    pub file_hashes: BTreeMap<String, String>,
    /// SHA-256 of [`CohortConfig::canonical_json`].
    pub config_sha256: String,
    /// The frozen uncertainty key, when the cohort has one.
    pub uncertainty_key: Option<Vec<UncertaintyEntry>>,
}

impl CohortFiles {
    /// The bytes of `name`, or `None` when it is missing.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.files.get(name).and_then(|f| f.as_deref())
    }

    /// The SHA-256 of every present file.
    pub fn hashes(&self) -> BTreeMap<String, String> {
        self.files.iter().filter_map(|(name, bytes)| Some((name.clone(), sha256_hex(bytes.as_deref()?)))).collect()
    }

    /// Validates the five files together.
    pub fn validate(&self) -> Result<ValidatedCohort, ValidationError> {
        let mut problems = Vec::new();
        let mut texts: BTreeMap<&str, &str> = BTreeMap::new();
        for name in FROZEN_FILES {
            match self.get(name) {
                None => problems.push(Problem::in_file(name, "missing: a cohort directory needs this file")),
                Some(bytes) => match std::str::from_utf8(bytes) {
                    Ok(text) if text.trim().is_empty() => problems.push(Problem::in_file(name, "is empty")),
                    Ok(text) if text.starts_with(BOM) && BOM_REFUSED.contains(&name) => {
                        problems.push(bom_problem(name));
                    }
                    Ok(text) => {
                        texts.insert(name, text);
                    }
                    Err(e) => {
                        let offset = e.valid_up_to();
                        // The valid prefix is text, so the position can be named.
                        let valid = std::str::from_utf8(&bytes[..offset]).unwrap_or_default();
                        problems.push(Problem::at_offset(
                            name,
                            valid,
                            offset,
                            format!("is not valid UTF-8 (invalid byte at offset {offset}): save it as UTF-8"),
                        ));
                    }
                },
            }
        }
        let config = texts.get(config::FILE).and_then(|text| match config::build_and_validate(text) {
            Ok(c) => Some(c),
            Err(p) => {
                problems.extend(p);
                None
            }
        });
        let questions = match (texts.get(questions::FILE), &config) {
            (Some(text), Some(config)) => match questions::parse_and_validate(text, &config.categories) {
                Ok(q) => Some(q),
                Err(p) => {
                    problems.extend(p);
                    None
                }
            },
            // Categories come from the config: without it, check the
            // questions against the default categories so their other
            // problems are still reported in this round.
            (Some(text), None) => {
                let defaults: Vec<String> = config::DEFAULT_CATEGORIES.map(str::to_owned).to_vec();
                if let Err(p) = questions::parse_and_validate(text, &defaults) {
                    problems.extend(p.into_iter().filter(|p| !p.message.starts_with("unknown category")));
                }
                None
            }
            _ => None,
        };
        let review_declared = config.as_ref().is_some_and(|c| c.review.is_some());
        if review_declared && self.get(uncertainty_key::FILE).is_none() {
            problems.push(Problem::in_file(
                uncertainty_key::FILE,
                "missing: the cohort declares human review ([review] in cohort.toml), so seed 004's uncertainty key \
                 must be frozen before collection, one entry per question (docs/review.md \"The uncertainty key\")",
            ));
        }
        let key = match (self.get(uncertainty_key::FILE), &questions) {
            (Some(bytes), Some(questions)) => match std::str::from_utf8(bytes) {
                Ok(text) if text.starts_with(BOM) => {
                    problems.push(bom_problem(uncertainty_key::FILE));
                    None
                }
                Ok(text) => {
                    let ids = questions.iter().map(|q| q.id.as_str()).collect();
                    match uncertainty_key::parse_and_validate(text, &ids) {
                        Ok(key) if review_declared => {
                            let uncovered =
                                uncertainty_key::check_every_question(&key, questions.iter().map(|q| q.id.as_str()));
                            if uncovered.is_empty() {
                                Some(key)
                            } else {
                                problems.extend(uncovered);
                                None
                            }
                        }
                        Ok(key) => Some(key),
                        Err(p) => {
                            problems.extend(p);
                            None
                        }
                    }
                }
                Err(e) => {
                    problems.push(Problem::in_file(
                        uncertainty_key::FILE,
                        format!("is not valid UTF-8 (invalid byte at offset {}): save it as UTF-8", e.valid_up_to()),
                    ));
                    None
                }
            },
            _ => None,
        };
        match (config, questions, texts.get(SUFFIX_FILE)) {
            (Some(config), Some(questions), Some(suffix)) if problems.is_empty() => {
                let config_sha256 = sha256_hex(config.canonical_json().as_bytes());
                Ok(ValidatedCohort {
                    suffix: suffix_for_prompt(suffix).to_owned(),
                    config,
                    questions,
                    file_hashes: self.hashes(),
                    config_sha256,
                    uncertainty_key: key,
                })
            }
            _ => Err(ValidationError { problems }),
        }
    }
}

/// The byte-order mark some editors put at the start of UTF-8 files.
const BOM: char = '\u{feff}';

/// The files a BOM is refused in: the parsed ones, which never froze with
/// one (the parsers refused it as "expected value"). Stripping it silently
/// would freeze a hash of bytes other than the ones read, and a tool that
/// re-derives the cohort from the files would have to know to strip it too;
/// refusing keeps the frozen bytes the ones every reader parses. The text
/// files (`suffix.txt`, `protocol.md`, `rubric.md`) are frozen as they are,
/// as before: refusing a BOM there now would fail cohorts already frozen.
const BOM_REFUSED: [&str; 2] = [config::FILE, questions::FILE];

fn bom_problem(file: &str) -> Problem {
    Problem {
        file: file.to_owned(),
        line: Some(1),
        column: Some(1),
        field: None,
        message: format!("{file} starts with a byte-order mark (U+FEFF): save it as UTF-8 without BOM"),
    }
}

impl ValidatedCohort {
    /// The planned run order (algorithm v1).
    pub fn run_order(&self) -> Vec<RunId> {
        let question_ids: Vec<&str> = self.questions.iter().map(|q| q.id.as_str()).collect();
        let arm_ids: Vec<&str> = self.config.arms.iter().map(|a| a.id.as_str()).collect();
        run_order(&question_ids, &arm_ids, self.config.repeats, self.config.seed)
    }

    /// The question with id `id`.
    pub fn question(&self, id: &str) -> Option<&Question> {
        self.questions.iter().find(|q| q.id == id)
    }
}

/// The suffix as appended: the file's text without its final line breaks
/// (a file conventionally ends with one; it is not part of the suffix).
pub fn suffix_for_prompt(file_text: &str) -> &str {
    file_text.trim_end_matches(['\n', '\r'])
}

/// The exact prompt of a run: the question verbatim, a blank line, then the
/// shared suffix verbatim.
pub fn prompt(question: &str, suffix: &str) -> String {
    format!("{question}\n\n{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn files(toml: &str, questions: &str) -> CohortFiles {
        let mut f = CohortFiles::default();
        f.files.insert(config::FILE.into(), Some(toml.as_bytes().to_vec()));
        f.files.insert(questions::FILE.into(), Some(questions.as_bytes().to_vec()));
        f.files.insert(SUFFIX_FILE.into(), Some(b"Cite sources.\n".to_vec()));
        f.files.insert(PROTOCOL_FILE.into(), Some(b"# Protocol\n".to_vec()));
        f.files.insert(RUBRIC_FILE.into(), Some(b"# Rubric\n".to_vec()));
        f
    }

    const TOML: &str = "name = \"t\"\nseed = 1\n[[arms]]\nid = \"a\"\nlabel = \"A\"\nadapter = \"sim\"\npinned_version = \"v1\"\nvendor_lineage = \"x\"\n";
    const QUESTIONS: &str = r#"[{"id":"s1","category":"science","text":"Why?"}]"#;

    #[test]
    fn validates_and_hashes_every_file() {
        let c = files(TOML, QUESTIONS).validate().unwrap();
        assert_eq!(c.file_hashes.len(), 5);
        assert_eq!(c.file_hashes["rubric.md"], sha256_hex(b"# Rubric\n"));
        assert_eq!(c.suffix, "Cite sources.");
        assert_eq!(prompt(&c.questions[0].text, &c.suffix), "Why?\n\nCite sources.");
        assert_eq!(c.run_order().len(), 1);
    }

    #[test]
    fn missing_and_non_utf8_files_are_named() {
        let mut f = files(TOML, QUESTIONS);
        f.files.insert(RUBRIC_FILE.into(), None);
        f.files.insert(PROTOCOL_FILE.into(), Some(b"ok\nbad \xff byte".to_vec()));
        let e = f.validate().unwrap_err();
        let text: Vec<String> = e.problems.iter().map(ToString::to_string).collect();
        assert!(text.iter().any(|p| p.starts_with("protocol.md:2:5:") && p.contains("UTF-8")), "{text:?}");
        assert!(text.iter().any(|p| p.starts_with("rubric.md: missing")), "{text:?}");
    }

    #[test]
    fn the_uncertainty_key_is_optional_validated_and_hashed() {
        let without = files(TOML, QUESTIONS).validate().unwrap();
        assert!(without.uncertainty_key.is_none());
        assert!(!without.file_hashes.contains_key(uncertainty_key::FILE));
        let mut f = files(TOML, QUESTIONS);
        let key = br#"[{"question_id":"s1","answerable":false,"required_caveats":["no record"]}]"#;
        f.files.insert(uncertainty_key::FILE.into(), Some(key.to_vec()));
        let with = f.validate().unwrap();
        assert_eq!(with.uncertainty_key.as_ref().map(Vec::len), Some(1));
        assert_eq!(with.file_hashes[uncertainty_key::FILE], sha256_hex(key));
        f.files.insert(uncertainty_key::FILE.into(), Some(br#"[{"question_id":"nope","answerable":true}]"#.to_vec()));
        let e = f.validate().unwrap_err();
        assert!(e.to_string().contains("uncertainty_key.json:1:2: field `[0].question_id`"), "{e}");
    }

    /// Proves the key is required with `[review]` (issue 20): missing, it
    /// is named with what to do; present, every question needs an entry,
    /// each uncovered question named with the file and field; covering all
    /// of them freezes.
    #[test]
    fn a_cohort_declaring_review_needs_a_key_for_every_question() {
        let toml = format!("{TOML}[review]\nreviewers = 2\n");
        let two = r#"[{"id":"s1","category":"science","text":"Why?"},{"id":"s2","category":"science","text":"How?"}]"#;
        let e = files(&toml, two).validate().unwrap_err();
        assert_eq!(e.problems.len(), 1, "{e}");
        assert!(
            e.problems[0].to_string().starts_with("uncertainty_key.json: missing: the cohort declares human review")
        );
        let mut f = files(&toml, two);
        f.files.insert(uncertainty_key::FILE.into(), Some(br#"[{"question_id":"s2","answerable":true}]"#.to_vec()));
        let e = f.validate().unwrap_err();
        let text: Vec<String> = e.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "uncertainty_key.json: field `question_id`: question \"s1\" has no entry: the cohort declares human review \
              ([review] in cohort.toml), so the key needs exactly one entry per question of questions.json"
            ]
        );
        let both = br#"[{"question_id":"s2","answerable":true},{"question_id":"s1","answerable":false}]"#;
        f.files.insert(uncertainty_key::FILE.into(), Some(both.to_vec()));
        let c = f.validate().unwrap();
        assert_eq!(c.uncertainty_key.map(|k| k.len()), Some(2));
        assert_eq!(c.config.review.map(|r| r.reviewers), Some(2));
        // Without [review] a partial key is still accepted (at most one
        // entry per question), as before.
        let mut f = files(TOML, two);
        f.files.insert(uncertainty_key::FILE.into(), Some(br#"[{"question_id":"s2","answerable":true}]"#.to_vec()));
        assert!(f.validate().is_ok());
    }

    /// Proves a byte-order mark in a parsed file is named (it was
    /// "expected value") with what to do, and refused rather than stripped.
    #[test]
    fn a_bom_in_a_parsed_file_says_to_save_without_it() {
        let e = files(TOML, &format!("\u{feff}{QUESTIONS}")).validate().unwrap_err();
        assert_eq!(
            e.problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["questions.json:1:1: questions.json starts with a byte-order mark (U+FEFF): save it as UTF-8 without BOM"]
        );
        let e = files(&format!("\u{feff}{TOML}"), QUESTIONS).validate().unwrap_err();
        assert!(
            e.problems[0].to_string().starts_with("cohort.toml:1:1: cohort.toml starts with a byte-order mark"),
            "{e}"
        );
    }

    #[test]
    fn problems_in_several_files_come_together() {
        let e =
            files(&TOML.replace("seed = 1", "seed = 1\nextra = 2"), r#"[{"id":"s1","category":"science","text":""}]"#)
                .validate()
                .unwrap_err();
        assert_eq!(e.problems.len(), 2, "{e}");
    }
}
