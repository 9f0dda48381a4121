//! Secrets (provider API keys, team keys) that never reach a log, an error,
//! a trace or a response.
//!
//! [`Secret`] prints as `[redacted]` through `Debug` and `Display`, so a
//! `tracing` field or an `{:?}` of a config cannot leak it. The only way to
//! the value is [`Secret::expose`], called where a key is put into an
//! outgoing header or compared with a presented key. [`Redactor`] scrubs
//! every known secret out of text the proxy did not write itself (provider
//! error bodies echo keys back: "Incorrect API key provided: sk-...").

use std::fmt;

/// What a redacted secret prints as.
pub const REDACTED: &str = "[redacted]";

/// A secret string. `Debug` and `Display` print [`REDACTED`].
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself: only for an outgoing header or a comparison.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Compares with a presented value in time independent of where the
    /// first difference is (team keys arrive from the network).
    pub fn matches(&self, presented: &str) -> bool {
        let a = self.0.as_bytes();
        let b = presented.as_bytes();
        if a.len() != b.len() {
            return false;
        }
        a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

/// Replaces every known secret in a text with [`REDACTED`].
#[derive(Clone, Default)]
pub struct Redactor {
    /// The secrets, longest first, so a key that contains another is
    /// replaced whole.
    secrets: Vec<Secret>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor").field("secrets", &self.secrets.len()).finish()
    }
}

/// Secrets shorter than this are not scrubbed from text: replacing every
/// "a" in an error message would destroy it, and keys are never that short
/// (config validation refuses them).
pub const MIN_SECRET_LEN: usize = 8;

/// The shortest start of a secret scrubbed at the end of a cut text.
const MIN_PARTIAL: usize = 4;

impl Redactor {
    pub fn new(secrets: impl IntoIterator<Item = Secret>) -> Redactor {
        let mut secrets: Vec<Secret> = secrets.into_iter().filter(|s| s.0.len() >= MIN_SECRET_LEN).collect();
        secrets.sort_by_key(|s| std::cmp::Reverse(s.0.len()));
        secrets.dedup();
        Redactor { secrets }
    }

    /// `text` with every known secret replaced, including the start of a
    /// secret cut off at the end of the text (details are cut to a length
    /// before they reach here, and the cut can fall inside an echoed key).
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in &self.secrets {
            if out.contains(secret.expose()) {
                out = out.replace(secret.expose(), REDACTED);
            }
        }
        for secret in &self.secrets {
            let key = secret.expose();
            // The longest prefix of the key (at least MIN_PARTIAL bytes)
            // that the text ends with.
            let cut =
                (MIN_PARTIAL..key.len()).rev().filter(|&n| key.is_char_boundary(n)).find(|&n| out.ends_with(&key[..n]));
            if let Some(n) = cut {
                out.truncate(out.len() - n);
                out.push_str(REDACTED);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("sk-live-0123456789");
        assert_eq!(format!("{s} {s:?}"), "[redacted] [redacted]");
        assert!(s.matches("sk-live-0123456789"));
        assert!(!s.matches("sk-live-012345678"));
        assert!(!s.matches("sk-live-0123456780"));
    }

    /// A detail cut inside an echoed key does not keep the key's start.
    #[test]
    fn redactor_scrubs_a_key_cut_at_the_end() {
        let r = Redactor::new([Secret::new("sk-live-0123456789")]);
        assert_eq!(r.scrub("Incorrect API key provided: sk-live-0123"), "Incorrect API key provided: [redacted]");
        assert_eq!(r.scrub("ends with sk"), "ends with sk", "too short a start to be the key");
    }

    #[test]
    fn redactor_scrubs_every_occurrence() {
        let r = Redactor::new([Secret::new("sk-abcdefgh"), Secret::new("sk-abcdefgh-long"), Secret::new("short")]);
        assert_eq!(
            r.scrub("key sk-abcdefgh-long and sk-abcdefgh; short stays"),
            "key [redacted] and [redacted]; short stays"
        );
    }
}
