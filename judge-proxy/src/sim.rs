//! The `sim` upstream: a deterministic SIMULATED judge, built in, for the
//! offline quickstart and for tests. It is not a model and measures nothing
//! about real support; every response it produces is labelled simulated
//! (gRPC `JudgeResponse.simulated`, the trace records' `"simulated": true`,
//! the passthrough's `x-cohort-simulated: true`).
//!
//! It receives the same OpenAI-shaped chat request a real provider would
//! (for a judge call: seed 000's prompt as built by
//! `cohort_core::scoring::judge_prompt`) and answers with an OpenAI chat
//! completion body, which the proxy then reads like any provider's
//! ([`crate::provider::read_answer`]): limiter, concurrency, attempt
//! timeout, classification, retries, verdict parser and strict mode all
//! run as for a real upstream. No network, no randomness, no clock.
//!
//! **Reading the prompt.** The last `user` message is read line by line:
//! `Claim N: <sentence>` starts claim N, `Evidence N:` (the same N) opens
//! its evidence, and each following `- <snippet>` line is one snippet. The
//! prompt builder puts every claim and snippet on one line, so a snippet
//! cannot pass for a claim. Other lines (the preamble) are ignored.
//!
//! **The rule.** A claim's *content words* are its distinct words (maximal
//! runs of letters and digits, lower-cased) of at least 4 characters that
//! are not in [`STOP_WORDS`]. The answer is `Claim N: YES` when at least
//! three quarters of them ([`SUPPORT_NUMERATOR`]/[`SUPPORT_DENOMINATOR`])
//! occur as words in the claim's own evidence snippets, else `Claim N: NO`
//! (also when the claim has no content word or no evidence: conservative,
//! as the seed's prompt asks). Exact word matches only: no stemming.
//!
//! With the built-in sim *system* (`worker::adapters::sim`) this says YES
//! to its supported claims (whose sentence its source's snippet restates)
//! and NO to its planted unsupported ones (whose words "asserted" and
//! "although" are in no snippet), so a quickstart's support comes out near
//! `1 - unsupported_claim_rate`.
//!
//! **The reply.** One line per claim read, in prompt order, joined by `\n`.
//! A prompt with no claim line gets [`NO_CLAIMS_REPLY`], which has no
//! verdict line: the verdict parser leaves every claim unparseable. The
//! body's `model` is the requested model (so strict mode passes when that
//! is the pinned judge); `usage` counts whitespace-separated tokens of the
//! messages' contents (`prompt_tokens`) and of the reply
//! (`completion_tokens`), not a real tokenizer's; cost is whatever the
//! price catalog says about the model (normally nothing: unknown).

use std::collections::BTreeSet;

use serde_json::{Value, json};

/// The reply to a prompt in which no `Claim N:` line was found. It has no
/// verdict line, so it decides nothing.
pub const NO_CLAIMS_REPLY: &str =
    "The simulated judge found no numbered claims to judge in this prompt (SIMULATED; no verdict).";

/// A claim is supported when content words found / content words is at
/// least this fraction.
pub const SUPPORT_NUMERATOR: usize = 3;
pub const SUPPORT_DENOMINATOR: usize = 4;

/// Words of 4 characters or more that carry no content: they never count
/// for or against a claim.
pub const STOP_WORDS: &[&str] = &[
    "about", "above", "after", "also", "been", "before", "being", "below", "between", "both", "could", "does", "doing",
    "down", "during", "each", "from", "further", "have", "having", "here", "into", "just", "more", "most", "only",
    "other", "over", "same", "should", "some", "such", "than", "that", "their", "theirs", "them", "then", "there",
    "these", "they", "this", "those", "through", "under", "until", "very", "were", "what", "when", "where", "which",
    "while", "whom", "will", "with", "would", "your", "yours",
];

/// A claim read back out of a judge prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptClaim {
    /// N of its `Claim N:` line.
    pub number: u64,
    pub text: String,
    /// Its `- ` lines after `Evidence N:`.
    pub evidence: Vec<String>,
}

/// The claims of a judge prompt's user message, in order.
pub fn parse_prompt(user: &str) -> Vec<PromptClaim> {
    let mut claims: Vec<PromptClaim> = Vec::new();
    let mut in_evidence = false;
    for line in user.lines() {
        if let Some((n, text)) = numbered(line, "Claim") {
            claims.push(PromptClaim { number: n, text: text.to_owned(), evidence: Vec::new() });
            in_evidence = false;
        } else if let Some((n, rest)) = numbered(line, "Evidence") {
            // Evidence belongs to the claim just read, and only under its
            // own number.
            in_evidence = rest.is_empty() && claims.last().is_some_and(|c| c.number == n);
        } else if in_evidence && let Some(snippet) = line.strip_prefix("- ") {
            if let Some(c) = claims.last_mut() {
                c.evidence.push(snippet.to_owned());
            }
        } else {
            in_evidence = false;
        }
    }
    claims
}

/// `WORD N: rest` as (N, rest trimmed).
fn numbered<'a>(line: &'a str, word: &str) -> Option<(u64, &'a str)> {
    let rest = line.strip_prefix(word)?.strip_prefix(' ')?;
    let (n, rest) = rest.split_once(':')?;
    let n = n.parse::<u64>().ok()?;
    Some((n, rest.trim()))
}

/// The words of `text`: maximal runs of letters and digits, lower-cased.
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase)
}

/// The distinct content words of a claim (see the module header).
pub fn content_words(claim: &str) -> BTreeSet<String> {
    words(claim).filter(|w| w.chars().count() >= 4 && !STOP_WORDS.contains(&w.as_str())).collect()
}

/// The rule: whether `evidence` holds enough of `claim`'s content words.
pub fn supported(claim: &str, evidence: &[String]) -> bool {
    let wanted = content_words(claim);
    if wanted.is_empty() {
        return false;
    }
    let have: BTreeSet<String> = evidence.iter().flat_map(|s| words(s)).collect();
    let found = wanted.iter().filter(|w| have.contains(*w)).count();
    found * SUPPORT_DENOMINATOR >= wanted.len() * SUPPORT_NUMERATOR
}

/// The simulated judge's reply text to a user message.
pub fn reply_text(user: &str) -> String {
    let claims = parse_prompt(user);
    if claims.is_empty() {
        return NO_CLAIMS_REPLY.to_owned();
    }
    claims
        .iter()
        .map(|c| format!("Claim {}: {}", c.number, if supported(&c.text, &c.evidence) { "YES" } else { "NO" }))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The text of a message's `content` (a string, or OpenAI content parts).
fn content(message: &Value) -> String {
    match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("")
        }
        _ => String::new(),
    }
}

/// Answers an OpenAI chat-completion request `body` with an OpenAI chat
/// completion body: the reply to its last `user` message, `model` the
/// requested one, whitespace-token usage. Deterministic: the same body
/// gets the same bytes.
pub fn answer(body: &Value) -> Value {
    let model = body.get("model").and_then(Value::as_str).unwrap_or_default();
    let messages: &[Value] = body.get("messages").and_then(Value::as_array).map_or(&[], Vec::as_slice);
    let user = messages.iter().rev().find(|m| m.get("role").and_then(Value::as_str) == Some("user")).map(content);
    let reply = reply_text(user.as_deref().unwrap_or_default());
    let prompt_tokens: usize = messages.iter().map(|m| content(m).split_whitespace().count()).sum();
    let completion_tokens = reply.split_whitespace().count();
    json!({
        "id": "chatcmpl-cohort-sim",
        "object": "chat.completion",
        // Fixed, so that the answer is a function of the request alone.
        "created": 0,
        "model": model,
        "system_fingerprint": "cohort-sim-judge (SIMULATED)",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": reply},
            "finish_reason": "stop",
        }],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    })
}

#[cfg(test)]
mod tests {
    use cohort_core::scoring::{self, JudgeClaim, UnjudgedReason, Verdict};

    use super::*;

    fn prompt(claims: &[(&str, &[&str])]) -> String {
        let claims: Vec<JudgeClaim> = claims
            .iter()
            .map(|(t, s)| JudgeClaim { text: (*t).to_owned(), snippets: s.iter().map(|x| (*x).to_owned()).collect() })
            .collect();
        scoring::judge_prompt(&claims).1
    }

    /// The reply to seed 000's prompt, built by the real prompt builder:
    /// one line per claim, YES when the claim's own evidence restates it,
    /// NO when its words are elsewhere (another claim's evidence) or
    /// missing, NO for a claim with no content word.
    #[test]
    fn replies_one_verdict_per_claim_from_its_own_evidence() {
        let user = prompt(&[
            ("Sales of electric buses doubled in Norway.", &["In Norway, sales of electric buses doubled last year."]),
            ("Diesel prices collapsed in Chile.", &["Electric buses are popular.", "Chile has mountains."]),
            ("It is so.", &["It is so."]),
            ("Chile has mountains and deserts.", &["Norway has fjords."]),
        ]);
        assert_eq!(reply_text(&user), "Claim 1: YES\nClaim 2: NO\nClaim 3: NO\nClaim 4: NO");
        let parsed = scoring::parse_verdicts(&reply_text(&user), 4).unwrap();
        let verdicts: Vec<Verdict> = parsed.into_iter().map(|p| p.verdict).collect();
        assert_eq!(verdicts, [Verdict::Yes, Verdict::No, Verdict::No, Verdict::No]);
    }

    /// Three quarters of the content words are enough; fewer are not.
    #[test]
    fn the_threshold_is_three_quarters_of_content_words() {
        // Content words: alpha, bravo, charlie, delta ("with" is a stop word).
        let claim = "Alpha with bravo, charlie and delta.";
        assert_eq!(content_words(claim).len(), 4);
        assert!(supported(claim, &["alpha BRAVO charlie".into()]), "3 of 4");
        assert!(!supported(claim, &["alpha bravo".into()]), "2 of 4");
        assert!(!supported(claim, &[]), "no evidence");
        assert!(!supported(claim, &["alphabet bravos charlies".into()]), "whole words only");
    }

    /// The same request gets the same bytes; usage counts whitespace
    /// tokens; the body names the requested model.
    #[test]
    fn the_answer_is_deterministic_and_names_the_requested_model() {
        let user = prompt(&[("Sales of buses doubled.", &["Sales of buses doubled."])]);
        let body = json!({
            "model": "cohort-sim-judge-1",
            "messages": [{"role": "system", "content": "be strict"}, {"role": "user", "content": user}],
            "temperature": 0.0,
        });
        let a = answer(&body);
        assert_eq!(serde_json::to_vec(&a).unwrap(), serde_json::to_vec(&answer(&body)).unwrap());
        assert_eq!(a["model"], "cohort-sim-judge-1");
        assert_eq!(a["choices"][0]["message"]["content"], "Claim 1: YES");
        let prompt_tokens = 2 + user.split_whitespace().count();
        assert_eq!(a["usage"]["prompt_tokens"], prompt_tokens);
        assert_eq!(a["usage"]["completion_tokens"], 3);
    }

    /// A prompt without claims is answered, not refused, and what it says
    /// decides nothing: every claim stays unparseable.
    #[test]
    fn an_unparseable_prompt_leaves_claims_unjudged() {
        for user in ["hello there", "", "Claim one: is not numbered\nEvidence 1:\n- x"] {
            let reply = reply_text(user);
            assert_eq!(reply, NO_CLAIMS_REPLY);
            let parsed = scoring::parse_verdicts(&reply, 2).unwrap();
            assert!(parsed.iter().all(|p| p.verdict == Verdict::Unjudged(UnjudgedReason::Unparseable)), "{parsed:?}");
        }
        let a = answer(&json!({"model": "m", "messages": "not a list"}));
        assert_eq!(a["choices"][0]["message"]["content"], NO_CLAIMS_REPLY);
    }

    /// Evidence is read only under its own claim's number, and a bullet
    /// outside an evidence block is not evidence.
    #[test]
    fn evidence_belongs_to_its_own_claim() {
        let user = "Preamble\n\nClaim 1: Apples ripen quickly.\nEvidence 2:\n- Apples ripen quickly.\n\nClaim 2: Pears ripen slowly.\n- Pears ripen slowly.\nEvidence 2:\n- nothing relevant";
        let claims = parse_prompt(user);
        assert_eq!(claims.len(), 2);
        assert!(claims[0].evidence.is_empty(), "{claims:?}");
        assert_eq!(claims[1].evidence, ["nothing relevant"]);
        assert_eq!(reply_text(user), "Claim 1: NO\nClaim 2: NO");
    }
}
