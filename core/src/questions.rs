//! `questions.json`: an array of `{id, category, text}`. Every problem is
//! reported with the line of the question it is about, including the ones
//! serde cannot see (duplicate ids, unknown categories).

use serde::{Deserialize, Serialize};

use crate::config::id_problem;
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
pub fn parse_and_validate(text: &str, categories: &[String]) -> Result<Vec<Question>, Vec<Problem>> {
    // Each element is first taken as raw JSON borrowed from `text`, so its
    // byte offset, and so its line, is known for the checks below.
    let elements = json_elements(FILE, text)?;
    let mut problems = Vec::new();
    let mut questions: Vec<Question> = Vec::with_capacity(elements.len());
    let mut first_line_of: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
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
        } else if let Some(first) = first_line_of.get(&question.id) {
            problems.push(at(format!("duplicate question id \"{}\" (first at line {first})", question.id), "id"));
        } else {
            first_line_of.insert(question.id.clone(), line);
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

    #[test]
    fn bad_ids_categories_and_empty_text() {
        let p = problems(r#"[{"id":"a:b","category":"art","text":"  "}]"#);
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(p[0].contains("':'") && p[1].contains("unknown category \"art\"") && p[2].contains("empty text"));
        assert!(problems(r#"[{"id":"a b","category":"science","text":"x"}]"#)[0].contains("whitespace"));
        assert!(problems("[]")[0].contains("empty"));
    }
}
