//! The judge's reply, parsed line by line (seed 000 section 3.2): one
//! `Claim N: YES` or `Claim N: NO` line per claim.
//!
//! The parser is tolerant of what models actually write (any case, extra
//! spaces, bullets, bold, a trailing explanation) and strict about what
//! counts: a claim with no line is unjudged (`partial_reply`), a reply with
//! no parsable line at all leaves every claim unjudged (`unparseable`), and
//! a claim answered both YES and NO is unjudged rather than guessed.
//! Unjudged claims never count as YES or NO.

use serde::{Deserialize, Serialize};

/// The longest judge reply parsed. A judge batch of a few dozen claims
/// answers in a few KiB; a megabyte is not an answer.
pub const MAX_VERDICT_REPLY_BYTES: usize = 1024 * 1024;

/// The most claims one reply may answer: bounds the verdict vector a caller
/// can ask for.
pub const MAX_CLAIMS_PER_REPLY: usize = 10_000;

/// Why a claim was left unjudged. The names and meanings match
/// `cohort.v1.UnjudgedReason` in proto/proto/cohort/v1/judge.proto.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnjudgedReason {
    /// The reply had verdict lines, but none for this claim.
    PartialReply,
    /// The reply had no parsable verdict line at all.
    Unparseable,
    /// Strict mode: the served model was not the pinned judge model.
    ModelMismatch,
    /// Every attempt at the upstream failed.
    ProviderError,
    /// None of the claim's sources could be captured: nothing to judge
    /// against, and never a placeholder (seed 000 section 4).
    SourceUnavailable,
    /// The caller's deadline passed while waiting for a rate-limit permit.
    Deadline,
    /// An ensemble pass (`cohort judge --ensemble`): the member passes'
    /// votes were tied, or none had a verdict, so there is no majority.
    NoMajority,
}

impl UnjudgedReason {
    pub const ALL: [UnjudgedReason; 7] = [
        UnjudgedReason::PartialReply,
        UnjudgedReason::Unparseable,
        UnjudgedReason::ModelMismatch,
        UnjudgedReason::ProviderError,
        UnjudgedReason::SourceUnavailable,
        UnjudgedReason::Deadline,
        UnjudgedReason::NoMajority,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            UnjudgedReason::PartialReply => "partial_reply",
            UnjudgedReason::Unparseable => "unparseable",
            UnjudgedReason::ModelMismatch => "model_mismatch",
            UnjudgedReason::ProviderError => "provider_error",
            UnjudgedReason::SourceUnavailable => "source_unavailable",
            UnjudgedReason::Deadline => "deadline",
            UnjudgedReason::NoMajority => "no_majority",
        }
    }
}

/// The verdict on one claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The evidence directly corroborates the claim.
    Yes,
    /// It does not.
    No,
    /// No verdict; excluded from the support-rate denominator.
    Unjudged(UnjudgedReason),
}

/// One claim's verdict with the reply line it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedVerdict {
    pub verdict: Verdict,
    /// The judge's line for this claim, verbatim and trimmed (the trace's
    /// `judge_reasoning`); `None` when the reply had none.
    pub line: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerdictError {
    #[error("the judge reply is {len} bytes; at most {MAX_VERDICT_REPLY_BYTES} bytes are parsed")]
    ReplyTooLarge { len: usize },
    #[error("{n} claims asked for in one reply; at most {MAX_CLAIMS_PER_REPLY} are accepted")]
    TooManyClaims { n: usize },
}

/// Parses a judge reply for `n_claims` claims numbered 1..=n_claims, in
/// claim order. Lines for claim numbers outside that range are ignored.
pub fn parse_verdicts(reply: &str, n_claims: usize) -> Result<Vec<ParsedVerdict>, VerdictError> {
    if reply.len() > MAX_VERDICT_REPLY_BYTES {
        return Err(VerdictError::ReplyTooLarge { len: reply.len() });
    }
    if n_claims > MAX_CLAIMS_PER_REPLY {
        return Err(VerdictError::TooManyClaims { n: n_claims });
    }
    // Per claim: the first line seen, and whether YES / NO were seen.
    let mut seen: Vec<(Option<&str>, bool, bool)> = vec![(None, false, false); n_claims];
    let mut any = false;
    for line in reply.lines() {
        let Some((n, yes)) = parse_line(line) else { continue };
        any = true;
        let Some(slot) = n.checked_sub(1).and_then(|k| seen.get_mut(k)) else { continue };
        if slot.0.is_none() {
            slot.0 = Some(line.trim());
        }
        if yes {
            slot.1 = true;
        } else {
            slot.2 = true;
        }
    }
    Ok(seen
        .into_iter()
        .map(|(line, yes, no)| {
            let verdict = match (any, yes, no) {
                (false, _, _) => Verdict::Unjudged(UnjudgedReason::Unparseable),
                (true, true, false) => Verdict::Yes,
                (true, false, true) => Verdict::No,
                // Both answers for one claim: not a verdict.
                (true, true, true) => Verdict::Unjudged(UnjudgedReason::Unparseable),
                (true, false, false) => Verdict::Unjudged(UnjudgedReason::PartialReply),
            };
            ParsedVerdict { verdict, line: line.map(str::to_owned) }
        })
        .collect())
}

/// One verdict line: optional bullets and emphasis, `claim`, a number, a
/// separator (`:`, `-`, `.`, `)`, a dash), then `yes` or `no` as a whole
/// word (not followed by a letter or digit of any script).
fn parse_line(line: &str) -> Option<(usize, bool)> {
    let decorations = |c: char| c.is_whitespace() || matches!(c, '*' | '_' | '-' | '#' | '>' | '`' | '•');
    let rest = line.trim_start_matches(decorations);
    let word = rest.get(..5)?;
    if !word.eq_ignore_ascii_case("claim") {
        return None;
    }
    let rest = rest[5..].trim_start_matches(|c: char| c.is_whitespace() || c == '#');
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 6 {
        return None;
    }
    let n: usize = rest[..digits].parse().ok()?;
    let rest = rest[digits..].trim_start_matches(|c: char| c.is_whitespace() || matches!(c, '*' | '_'));
    let rest = rest.strip_prefix([':', '-', '.', ')', '–', '—'])?;
    let rest = rest.trim_start_matches(|c: char| c.is_whitespace() || matches!(c, '*' | '_' | '"' | '`'));
    // The answer is the whole word: `YESTERDAY`, `YESNO` and `YES2` are not
    // verdicts.
    let answer = &rest[..rest.find(|c: char| !c.is_alphanumeric()).unwrap_or(rest.len())];
    if answer.eq_ignore_ascii_case("yes") {
        Some((n, true))
    } else if answer.eq_ignore_ascii_case("no") {
        Some((n, false))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdicts(reply: &str, n: usize) -> Vec<Verdict> {
        parse_verdicts(reply, n).unwrap().into_iter().map(|v| v.verdict).collect()
    }

    /// The seed's format, and the variations models write, all parse.
    #[test]
    fn parses_tolerant_of_case_spacing_and_decoration() {
        let reply = "Claim 1: YES\nclaim 2 : no\n  - **Claim 3:** Yes, the snippet says so.\nCLAIM   4:NO.\n";
        assert_eq!(verdicts(reply, 4), vec![Verdict::Yes, Verdict::No, Verdict::Yes, Verdict::No]);
    }

    /// Claims without a line are partial_reply; an answer that is neither
    /// YES nor NO is not a verdict; extra claim numbers are ignored.
    #[test]
    fn missing_claims_are_partial_reply() {
        let got = verdicts("Claim 1: YES\nClaim 3: maybe\nClaim 9: NO", 3);
        assert_eq!(
            got,
            vec![
                Verdict::Yes,
                Verdict::Unjudged(UnjudgedReason::PartialReply),
                Verdict::Unjudged(UnjudgedReason::PartialReply)
            ]
        );
    }

    /// A reply with no verdict line at all leaves every claim unparseable.
    #[test]
    fn no_parsable_line_is_unparseable() {
        let got = verdicts("I cannot judge these claims.\nClaim one: yes", 2);
        assert_eq!(got, vec![Verdict::Unjudged(UnjudgedReason::Unparseable); 2]);
        assert!(parse_verdicts("", 0).unwrap().is_empty());
    }

    /// YES and NO for the same claim cancel into unjudged, never a guess;
    /// YESNO is not YES.
    #[test]
    fn contradictory_or_run_on_answers_are_not_verdicts() {
        let got = verdicts("Claim 1: YES\nClaim 1: NO\nClaim 2: YESNO\nClaim 3: no", 3);
        assert_eq!(
            got,
            vec![
                Verdict::Unjudged(UnjudgedReason::Unparseable),
                Verdict::Unjudged(UnjudgedReason::PartialReply),
                Verdict::No
            ]
        );
    }

    /// The reasoning line is kept verbatim for the trace.
    #[test]
    fn keeps_the_reply_line() {
        let got = parse_verdicts("  Claim 1: NO - the snippet is about 2019.  ", 1).unwrap();
        assert_eq!(got[0].line.as_deref(), Some("Claim 1: NO - the snippet is about 2019."));
    }

    /// Lines as models decorate them; the line is kept verbatim (these
    /// cases were the judge proxy's own parser's tests).
    #[test]
    fn tolerant_of_markdown_and_strict_about_the_word() {
        let reply = "claim 1:yes\n  **Claim 2** : No\nCLAIM   3 - YES.\n- Claim 4: \"NO\"\nClaim 5: YESTERDAY\nClaim 6: YES2\nClaim 7: yesé";
        let got = parse_verdicts(reply, 7).unwrap();
        let partial = Verdict::Unjudged(UnjudgedReason::PartialReply);
        assert_eq!(
            got.iter().map(|v| v.verdict).collect::<Vec<_>>(),
            vec![Verdict::Yes, Verdict::No, Verdict::Yes, Verdict::No, partial, partial, partial],
            "YESTERDAY, YES2 and yesé are not verdicts"
        );
        assert_eq!(got[0].line.as_deref(), Some("claim 1:yes"), "the line is kept verbatim");
    }

    /// Claims without a line are partial_reply; a claim answered both ways
    /// is unparseable whatever order the lines come in; numbers beyond the
    /// batch are ignored.
    #[test]
    fn missing_and_conflicting_claims_are_unjudged() {
        let got = verdicts("Claim 1: YES\nClaim 3: NO\nClaim 3: YES\nClaim 9: YES", 3);
        assert_eq!(
            got,
            vec![
                Verdict::Yes,
                Verdict::Unjudged(UnjudgedReason::PartialReply),
                Verdict::Unjudged(UnjudgedReason::Unparseable)
            ],
            "conflicting lines decide nothing"
        );
    }

    /// Prose and the empty reply are unparseable for every claim.
    #[test]
    fn prose_is_unparseable() {
        let unparseable = Verdict::Unjudged(UnjudgedReason::Unparseable);
        assert_eq!(verdicts("I believe both claims are broadly accurate.", 2), vec![unparseable; 2]);
        assert_eq!(verdicts("", 1), vec![unparseable]);
    }

    /// Odd input never panics; claim 0 is a verdict line for no claim.
    #[test]
    fn never_panics_on_odd_input() {
        for reply in [
            "Claim",
            "Claim 99999999999999999999: YES",
            "Claim : YES",
            "claim\u{0}1: no",
            "Claim 0: YES",
            "é Claim 1: YES",
            "Clai\u{e9}",
        ] {
            let _ = parse_verdicts(reply, 2);
        }
        assert_eq!(verdicts("Claim 0: YES", 1), vec![Verdict::Unjudged(UnjudgedReason::PartialReply)]);
    }

    /// Oversized replies and claim counts are errors, not allocations.
    #[test]
    fn limits_are_errors() {
        assert!(parse_verdicts(&"x".repeat(MAX_VERDICT_REPLY_BYTES + 1), 1).is_err());
        assert!(parse_verdicts("", MAX_CLAIMS_PER_REPLY + 1).is_err());
    }
}
