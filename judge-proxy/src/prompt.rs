//! The judge prompt of seed 000 section 3.3, exactly, and the parser of the
//! judge's reply. Pure: no I/O.
//!
//! The reply is read line by line for `Claim N: YES` / `Claim N: NO`,
//! tolerant of case, spacing and Markdown decoration. A claim with no line
//! is unjudged (`partial_reply`); a reply with no parsable line at all
//! leaves every claim unjudged (`unparseable`). Unjudged never counts as
//! YES or NO.

/// The system part of the judge prompt, verbatim from seed 000 section 3.3.
pub const SYSTEM_PROMPT: &str =
    "You judge whether factual claims made in research reports are strictly supported by the
cited evidence snippets. For each numbered claim and evidence pair:
- Respond \"Claim N: YES\" if the evidence snippet directly corroborates the assertion.
- Respond \"Claim N: NO\" if the snippet does not contain sufficient facts to support the
  claim, if the claim extrapolates beyond the text, or if the snippet is irrelevant.
Do not assume external knowledge. Be strictly conservative.";

/// The head of the human part, verbatim from seed 000 section 3.3; the
/// numbered claims follow after a blank line.
pub const HUMAN_PREAMBLE: &str = "For each claim below, determine if it is supported by its cited evidence.
Answer with one line per claim in format: \"Claim N: YES\" or \"Claim N: NO\"";

/// One claim as the prompt shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptClaim {
    pub text: String,
    /// The captured snippets of the claim's cited sources.
    pub snippets: Vec<String>,
}

/// The human part for `claims`, numbered from 1 in order:
///
/// ```text
/// Claim 1: <extracted sentence>
/// Evidence 1:
/// - <snippet 1A>
/// - <snippet 1B>
/// ```
///
/// Line breaks inside a claim or snippet become spaces, so that nothing in
/// the evidence can pass for a line of the format.
pub fn human_prompt(claims: &[PromptClaim]) -> String {
    let mut out = String::from(HUMAN_PREAMBLE);
    out.push('\n');
    for (i, claim) in claims.iter().enumerate() {
        let n = i + 1;
        out.push_str(&format!("\nClaim {n}: {}\nEvidence {n}:\n", one_line(&claim.text)));
        for snippet in &claim.snippets {
            out.push_str(&format!("- {}\n", one_line(snippet)));
        }
    }
    out
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What the reply says about one claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParsedVerdict {
    /// `Claim N: YES`; the line, verbatim.
    Yes(String),
    /// `Claim N: NO`; the line, verbatim.
    No(String),
    /// The reply had verdict lines, but none (or conflicting ones) for this
    /// claim.
    Missing,
    /// The reply had no parsable verdict line at all.
    Unparseable,
}

/// Reads a reply for `n` claims: one [`ParsedVerdict`] per claim, in order.
pub fn parse_reply(reply: &str, n: usize) -> Vec<ParsedVerdict> {
    let mut found: Vec<Option<(bool, String)>> = vec![None; n];
    let mut conflicting = vec![false; n];
    let mut any = false;
    for line in reply.lines() {
        let Some((number, yes)) = parse_line(line) else { continue };
        any = true;
        let Some(slot) = number.checked_sub(1).and_then(|i| found.get_mut(i)) else { continue };
        match slot {
            None => *slot = Some((yes, line.trim().to_owned())),
            Some((earlier, _)) if *earlier != yes => conflicting[number - 1] = true,
            Some(_) => {}
        }
    }
    if !any {
        return vec![ParsedVerdict::Unparseable; n];
    }
    found
        .into_iter()
        .zip(conflicting)
        .map(|(v, conflict)| match v {
            _ if conflict => ParsedVerdict::Missing,
            Some((true, line)) => ParsedVerdict::Yes(line),
            Some((false, line)) => ParsedVerdict::No(line),
            None => ParsedVerdict::Missing,
        })
        .collect()
}

/// `Claim N: YES|NO` in any case, with any spacing, an optional separator
/// (`:`, `-`, `.`, `)`), and Markdown decoration (`**`, `-`, `#`, `>`)
/// around it. Anything after the verdict word must not continue the word
/// (`Claim 1: YESTERDAY` is not a verdict).
fn parse_line(line: &str) -> Option<(usize, bool)> {
    let lower = line.to_ascii_lowercase();
    let s = lower.trim_start_matches(|c: char| c.is_whitespace() || matches!(c, '*' | '-' | '#' | '>' | '_' | '`'));
    let s = s.strip_prefix("claim")?;
    let s = s.trim_start();
    let digits = s.len() - s.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 || digits > 6 {
        return None;
    }
    let number: usize = s[..digits].parse().ok()?;
    let s = s[digits..].trim_start_matches(|c: char| c.is_whitespace() || matches!(c, '*' | '_' | '`'));
    let s = s.strip_prefix([':', '-', '.', ')']).unwrap_or(s);
    let s = s.trim_start_matches(|c: char| c.is_whitespace() || matches!(c, '*' | '_' | '`' | '"'));
    let (yes, rest) = if let Some(rest) = s.strip_prefix("yes") {
        (true, rest)
    } else if let Some(rest) = s.strip_prefix("no") {
        (false, rest)
    } else {
        return None;
    };
    if rest.chars().next().is_some_and(|c| c.is_alphanumeric()) {
        return None;
    }
    Some((number, yes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_matches_the_seed_layout() {
        let claims = vec![
            PromptClaim { text: "The sky is blue.".into(), snippets: vec!["The sky\nis blue.".into(), "B".into()] },
            PromptClaim { text: "Water is dry.".into(), snippets: vec!["C".into()] },
        ];
        let expected = "For each claim below, determine if it is supported by its cited evidence.\n\
Answer with one line per claim in format: \"Claim N: YES\" or \"Claim N: NO\"\n\
\n\
Claim 1: The sky is blue.\nEvidence 1:\n- The sky is blue.\n- B\n\
\n\
Claim 2: Water is dry.\nEvidence 2:\n- C\n";
        assert_eq!(human_prompt(&claims), expected);
        assert!(SYSTEM_PROMPT.starts_with("You judge whether factual claims"));
        assert!(SYSTEM_PROMPT.ends_with("Be strictly conservative."));
    }

    #[test]
    fn tolerant_of_case_spacing_and_markdown() {
        let reply = "claim 1:yes\n  **Claim 2** : No\nCLAIM   3 - YES.\n- Claim 4: \"NO\"\nClaim 5: YESTERDAY";
        let v = parse_reply(reply, 5);
        assert!(matches!(v[0], ParsedVerdict::Yes(_)));
        assert!(matches!(v[1], ParsedVerdict::No(_)));
        assert!(matches!(v[2], ParsedVerdict::Yes(_)));
        assert!(matches!(v[3], ParsedVerdict::No(_)));
        assert_eq!(v[4], ParsedVerdict::Missing, "YESTERDAY is not a verdict");
        assert_eq!(v[0], ParsedVerdict::Yes("claim 1:yes".into()), "the line is kept verbatim");
    }

    #[test]
    fn missing_and_conflicting_claims_are_partial() {
        let v = parse_reply("Claim 1: YES\nClaim 3: NO\nClaim 3: YES\nClaim 9: YES", 3);
        assert!(matches!(v[0], ParsedVerdict::Yes(_)));
        assert_eq!(v[1], ParsedVerdict::Missing);
        assert_eq!(v[2], ParsedVerdict::Missing, "conflicting lines decide nothing");
    }

    #[test]
    fn prose_is_unparseable() {
        let v = parse_reply("I believe both claims are broadly accurate.", 2);
        assert_eq!(v, vec![ParsedVerdict::Unparseable, ParsedVerdict::Unparseable]);
        assert_eq!(parse_reply("", 1), vec![ParsedVerdict::Unparseable]);
    }

    #[test]
    fn never_panics_on_odd_input() {
        for reply in [
            "Claim",
            "Claim 99999999999999999999: YES",
            "Claim : YES",
            "claim\u{0}1: no",
            "Claim 0: YES",
            "é Claim 1: YES",
        ] {
            let _ = parse_reply(reply, 2);
        }
        assert_eq!(parse_reply("Claim 0: YES", 1), vec![ParsedVerdict::Missing]);
    }
}
