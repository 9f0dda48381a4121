//! `questions.json`: an array of `{id, category, text}`. Every problem is
//! reported with the line of the question it is about, including the ones
//! serde cannot see (duplicate ids, unknown categories).

use serde::{Deserialize, Serialize};

use crate::config::{id_key, id_problem};
use crate::error::{LineCounter, Problem, json_element, json_elements};

/// The file name of the questions within a cohort directory.
pub const FILE: &str = "questions.json";

/// One frozen question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Question {
    pub id: String,
    pub category: String,
    /// Used verbatim in the prompt.
    pub text: String,
}

/// Parses and validates `questions.json` against the cohort's categories.
/// The longest question text, in bytes: a research question, not a
/// document (seed 004's are under 300).
pub const MAX_QUESTION_BYTES: usize = 16 * 1024;

pub fn parse_and_validate(text: &str, categories: &[String]) -> Result<Vec<Question>, Vec<Problem>> {
    // Each element is first taken as raw JSON borrowed from `text`, so its
    // byte offset, and so its line, is known for the checks below.
    let elements = json_elements(FILE, text)?;
    let mut problems = Vec::new();
    let mut questions: Vec<Question> = Vec::with_capacity(elements.len());
    // id_key -> (id, line) of the first question with it: ids equal after
    // case folding and NFC are one id.
    let mut first_of: std::collections::HashMap<String, (String, usize)> = std::collections::HashMap::new();
    // Lines are counted incrementally (elements come in file order), so
    // validation stays linear in the file size.
    let mut lines = LineCounter::default();
    if elements.is_empty() {
        problems.push(Problem::in_file(FILE, "no questions: the array is empty"));
    }
    for (i, (offset, raw)) in elements.into_iter().enumerate() {
        let at = |message: String, field: &str| {
            Problem::at_offset(FILE, text, offset, message).field(format!("[{i}].{field}"))
        };
        let question: Question = match json_element(FILE, text, i, offset, raw) {
            Ok(q) => q,
            Err(p) => {
                problems.push(p);
                continue;
            }
        };
        let line = lines.line_at(text, offset);
        if let Some(why) = id_problem(&question.id) {
            problems.push(at(format!("question id \"{}\" {why}", question.id), "id"));
        } else if let Some((first, first_line)) = first_of.get(&id_key(&question.id)) {
            let message = if *first == question.id {
                format!("duplicate question id \"{first}\" (first at line {first_line})")
            } else {
                format!(
                    "question id {:?} is the same id as {first:?} (line {first_line}) once case and Unicode \
                     normalisation are ignored: make them differ in more than that",
                    question.id
                )
            };
            problems.push(at(message, "id"));
        } else {
            first_of.insert(id_key(&question.id), (question.id.clone(), line));
        }
        if !categories.contains(&question.category) {
            problems.push(at(
                format!(
                    "unknown category \"{}\": the cohort's categories are {}",
                    question.category,
                    categories.join(", ")
                ),
                "category",
            ));
        }
        if question.text.trim().is_empty() {
            problems.push(at(format!("question \"{}\" has empty text", question.id), "text"));
        } else if question.text.len() > MAX_QUESTION_BYTES {
            let len = question.text.len();
            problems.push(at(
                format!("question \"{}\" is {len} bytes long; at most {MAX_QUESTION_BYTES} are accepted", question.id),
                "text",
            ));
        }
        questions.push(question);
    }
    if problems.is_empty() { Ok(questions) } else { Err(problems) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cats() -> Vec<String> {
        vec!["science".into(), "history".into()]
    }

    fn problems(text: &str) -> Vec<String> {
        parse_and_validate(text, &cats()).err().unwrap_or_default().iter().map(ToString::to_string).collect()
    }

    /// Proves a question id that only looks like another (a Cyrillic
    /// letter for a Latin one) is a duplicate, and that over-long ids and
    /// texts are refused naming the field (issue 23).
    #[test]
    fn look_alike_and_oversized_questions_are_refused() {
        let p = problems(
            "[{\"id\":\"s1\",\"category\":\"science\",\"text\":\"a\"},\n{\"id\":\"\u{0455}1\",\"category\":\"science\",\"text\":\"b\"}]",
        );
        assert!(p.len() == 1 && p[0].contains("[1].id"), "{p:?}");
        let id = "q".repeat(crate::config::MAX_ID_BYTES + 1);
        let p = problems(&format!("[{{\"id\":\"{id}\",\"category\":\"science\",\"text\":\"a\"}}]"));
        assert!(p.len() == 1 && p[0].contains("[0].id") && p[0].contains("128"), "{p:?}");
        let text = "w ".repeat(MAX_QUESTION_BYTES);
        let p = problems(&format!("[{{\"id\":\"s1\",\"category\":\"science\",\"text\":\"{text}\"}}]"));
        assert!(p.len() == 1 && p[0].contains("[0].text") && p[0].contains("at most 16384"), "{p:?}");
    }

    #[test]
    fn parses_questions_in_file_order() {
        let q = parse_and_validate(
            r#"[{"id":"s1","category":"science","text":"Why?"},{"id":"h1","category":"history","text":"When?"}]"#,
            &cats(),
        )
        .unwrap();
        assert_eq!(q.iter().map(|q| q.id.as_str()).collect::<Vec<_>>(), ["s1", "h1"]);
    }

    #[test]
    fn duplicate_id_names_both_lines() {
        let text = "[\n  {\"id\": \"s1\", \"category\": \"science\", \"text\": \"a\"},\n  {\"id\": \"s1\", \"category\": \"science\", \"text\": \"b\"}\n]";
        let p = problems(text);
        assert_eq!(p, ["questions.json:3:3: field `[1].id`: duplicate question id \"s1\" (first at line 2)"]);
    }

    #[test]
    fn unknown_field_inside_an_element_has_the_absolute_line() {
        let text = "[\n  {\"id\": \"s1\", \"category\": \"science\", \"text\": \"a\"},\n  {\"id\": \"s2\",\n   \"categry\": \"science\", \"text\": \"b\"}\n]";
        let p = problems(text);
        assert_eq!(p.len(), 1);
        assert!(p[0].starts_with("questions.json:4:") && p[0].contains("categry"), "{p:?}");
    }

    #[test]
    fn syntax_errors_have_line_and_column() {
        let p = problems("[\n  {\"id\": \"s1\",,}\n]");
        assert!(p[0].starts_with("questions.json:2:"), "{p:?}");
    }

    /// Proves ids that differ only by case, by Unicode normalisation (NFC
    /// and NFD spellings of one letter) are one id, named with both
    /// spellings and lines; and that zero-width and control characters are
    /// refused.
    #[test]
    fn ids_equal_after_case_folding_and_nfc_are_duplicates() {
        let text = "[\n  {\"id\": \"s1\", \"category\": \"science\", \"text\": \"a\"},\n  {\"id\": \"S1\", \"category\": \"science\", \"text\": \"b\"}\n]";
        assert_eq!(
            problems(text),
            ["questions.json:3:3: field `[1].id`: question id \"S1\" is the same id as \"s1\" (line 2) once case and \
              Unicode normalisation are ignored: make them differ in more than that"]
        );
        let nfc_nfd = "[{\"id\":\"caf\u{e9}\",\"category\":\"science\",\"text\":\"a\"},\n{\"id\":\"cafe\u{301}\",\"category\":\"science\",\"text\":\"b\"}]";
        let p = problems(nfc_nfd);
        assert!(p.len() == 1 && p[0].contains("same id as \"café\" (line 1)"), "{p:?}");
        let p = problems(
            r#"[{"id":"STRASSE","category":"science","text":"a"},{"id":"straße","category":"science","text":"b"}]"#,
        );
        assert_eq!(p.len(), 1, "{p:?}");
        for bad in [r"s\u200b1", r"s\u200d1", r"s\ufeff1", r"s\u202e1", r"s\u00ad1"] {
            let p = problems(&format!(r#"[{{"id":"{bad}","category":"science","text":"a"}}]"#));
            assert!(p.len() == 1 && p[0].contains("invisible format characters"), "{bad}: {p:?}");
        }
        let p = problems(r#"[{"id":"s\u00071","category":"science","text":"a"}]"#);
        assert!(p.len() == 1 && p[0].contains("control characters"), "{p:?}");
    }

    #[test]
    fn bad_ids_categories_and_empty_text() {
        let p = problems(r#"[{"id":"a:b","category":"art","text":"  "}]"#);
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(p[0].contains("':'") && p[1].contains("unknown category \"art\"") && p[2].contains("empty text"));
        assert!(problems(r#"[{"id":"a b","category":"science","text":"x"}]"#)[0].contains("whitespace"));
        assert!(problems("[]")[0].contains("empty"));
    }
}
