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

use memchr::memmem;

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

/// Replaces every known secret in a text with [`REDACTED`]: the secret
/// itself, its base64 encodings (standard and URL-safe, padded or not, and
/// inside the encoding of a longer text such as `Bearer KEY` or `user:KEY`),
/// and masked echoes (a start of the key, mask characters, its last four).
///
/// Every form is precomputed once, as a `memchr` finder: a scrub is a few
/// vectorised scans of the text, cheap enough for every 200 body the
/// passthrough returns (the proxy's budget is about 0.1 ms of CPU per call).
#[derive(Clone, Default)]
pub struct Redactor {
    /// The secrets, longest first, so a key that contains another is
    /// replaced whole (the cut-at-the-end scrub of [`Redactor::scrub`]).
    secrets: Vec<Secret>,
    /// Every form to look for; an `Arc` because upstreams and the HTTP
    /// face each hold a clone.
    needles: std::sync::Arc<[Needle]>,
}

/// One form of one secret.
#[derive(Clone)]
struct Needle {
    finder: memmem::Finder<'static>,
    kind: NeedleKind,
}

#[derive(Clone)]
enum NeedleKind {
    /// The secret as it is: the match is replaced.
    Plain,
    /// The part of a base64 encoding that only the secret's bytes decide:
    /// the match, widened over the encoding's neighbouring characters
    /// (the groups that mix the secret with its surroundings, padding).
    Base64,
    /// The secret's last four characters, for a masked echo: the match
    /// counts only behind mask characters and a start of `key`.
    MaskedTail { key: String },
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

/// The shortest start of a key in a masked echo (`sk...abcd`).
const MIN_MASKED_PREFIX: usize = 2;

/// The fewest mask characters in a masked echo (`...`, `***`; `…` counts
/// as three): fewer is too likely to be ordinary punctuation.
const MIN_MASK_RUN: usize = 3;

const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URL_SAFE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// The base64 of `bytes` without padding, whole groups only (the caller
/// passes a multiple of three bytes).
fn base64_groups(bytes: &[u8], alphabet: &[u8; 64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() / 3 * 4);
    for g in bytes.chunks_exact(3) {
        let n = (u32::from(g[0]) << 16) | (u32::from(g[1]) << 8) | u32::from(g[2]);
        for shift in [18, 12, 6, 0] {
            out.push(alphabet[((n >> shift) & 63) as usize]);
        }
    }
    out
}

/// The parts of `key`'s base64 that do not depend on what surrounds it:
/// for each of the three alignments the key can have inside an encoded
/// text (`KEY`, `Bearer KEY`, `user:KEY`, ...), the encoding of the whole
/// groups of three bytes that are all the key's. Any base64 text holding
/// the key holds one of these.
fn base64_cores(key: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for skip in 0..3 {
        let rest = &key[skip.min(key.len())..];
        let whole = rest.len() / 3 * 3;
        if whole >= 6 {
            for alphabet in [STANDARD, URL_SAFE] {
                out.push(base64_groups(&rest[..whole], alphabet));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn is_base64_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_')
}

/// What a key's characters are taken to be when a masked echo is read
/// back to its start.
fn is_key_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_')
}

/// The mask characters before `end`: (where they start, how many).
fn mask_run(text: &[u8], end: usize) -> (usize, usize) {
    let (mut i, mut count) = (end, 0);
    loop {
        if i >= 1 && matches!(text[i - 1], b'*' | b'.') {
            i -= 1;
            count += 1;
        } else if i >= 3 && (text[i - 3..i] == *"…".as_bytes() || text[i - 3..i] == *"•".as_bytes()) {
            i -= 3;
            count += 3;
        } else {
            return (i, count);
        }
    }
}

impl Redactor {
    pub fn new(secrets: impl IntoIterator<Item = Secret>) -> Redactor {
        let mut secrets: Vec<Secret> = secrets.into_iter().filter(|s| s.0.len() >= MIN_SECRET_LEN).collect();
        secrets.sort_by_key(|s| std::cmp::Reverse(s.0.len()));
        secrets.dedup();
        let mut needles = Vec::new();
        for secret in &secrets {
            let key = secret.expose();
            needles.push(Needle { finder: memmem::Finder::new(key.as_bytes()).into_owned(), kind: NeedleKind::Plain });
            for core in base64_cores(key.as_bytes()) {
                needles.push(Needle { finder: memmem::Finder::new(&core).into_owned(), kind: NeedleKind::Base64 });
            }
            if key.is_ascii() {
                let tail = &key.as_bytes()[key.len() - 4..];
                needles.push(Needle {
                    finder: memmem::Finder::new(tail).into_owned(),
                    kind: NeedleKind::MaskedTail { key: key.to_owned() },
                });
            }
        }
        Redactor { secrets, needles: needles.into() }
    }

    /// `text` with every known secret replaced, including the start of a
    /// secret cut off at the end of the text (details are cut to a length
    /// before they reach here, and the cut can fall inside an echoed key).
    pub fn scrub(&self, text: &str) -> String {
        let mut out = match self.scrub_bytes(text.as_bytes()) {
            std::borrow::Cow::Borrowed(_) => text.to_owned(),
            // Matches and replacements are whole UTF-8 sequences, so the
            // result is UTF-8; the lossy path is never taken.
            std::borrow::Cow::Owned(b) => {
                String::from_utf8(b).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
            }
        };
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

    /// `bytes` (a whole body: UTF-8 or JSON text) with every form of every
    /// secret replaced by [`REDACTED`]; borrowed when there was none, the
    /// common case, so a clean body is not copied. A JSON text stays valid
    /// JSON: a replacement never starts inside an escape, and
    /// [`REDACTED`] needs none.
    pub fn scrub_bytes<'a>(&self, bytes: &'a [u8]) -> std::borrow::Cow<'a, [u8]> {
        let mut found: Vec<std::ops::Range<usize>> = Vec::new();
        for needle in self.needles.iter() {
            let n = needle.finder.needle().len();
            for at in needle.finder.find_iter(bytes) {
                let range = match &needle.kind {
                    NeedleKind::Plain => at..at + n,
                    NeedleKind::Base64 => widen_base64(bytes, at, at + n),
                    NeedleKind::MaskedTail { key } => match masked_start(bytes, at, key) {
                        Some(start) => start..at + n,
                        None => continue,
                    },
                };
                found.push(range);
            }
        }
        if found.is_empty() {
            return std::borrow::Cow::Borrowed(bytes);
        }
        found.sort_by_key(|r| r.start);
        let mut out = Vec::with_capacity(bytes.len());
        let mut copied = 0;
        for r in found {
            let start = r.start.max(copied);
            if r.end <= start {
                continue;
            }
            out.extend_from_slice(&bytes[copied..start]);
            out.extend_from_slice(REDACTED.as_bytes());
            copied = r.end;
        }
        out.extend_from_slice(&bytes[copied..]);
        std::borrow::Cow::Owned(out)
    }
}

/// A base64 core match at `start..end` widened to the whole encoded
/// token around it (the groups that mix the secret's bytes with its
/// surroundings, the encoded `Bearer ` or `user:`, the padding), but never
/// into a JSON escape before it (`\n`, `\u00e9`).
fn widen_base64(text: &[u8], start: usize, end: usize) -> std::ops::Range<usize> {
    let mut s = start;
    while s > 0 && is_base64_char(text[s - 1]) {
        s -= 1;
    }
    // An escape's letters are not base64: keep them, from the backslash
    // (an odd run of backslashes) through `uXXXX` or the one letter.
    let escaped = |i: usize| text[..i].iter().rev().take_while(|&&b| b == b'\\').count() % 2 == 1;
    if let Some(i) = (s..start).rev().find(|&i| escaped(i)) {
        s = if text[i] == b'u' { (i + 5).min(start) } else { i + 1 };
    }
    let mut e = end;
    while e < text.len() && is_base64_char(text[e]) {
        e += 1;
    }
    let mut padding = 0;
    while e < text.len() && padding < 2 && text[e] == b'=' {
        e += 1;
        padding += 1;
    }
    s..e
}

/// Where a masked echo of `key` that ends with its last four characters at
/// `tail` starts (`sk-ab...wxyz`, `sk-proj-****wxyz`): mask characters
/// right before, a start of the key before them, and the tail not run on
/// into more key characters.
fn masked_start(text: &[u8], tail: usize, key: &str) -> Option<usize> {
    if text.get(tail + 4).is_some_and(|&b| is_key_char(b)) {
        return None;
    }
    let (mask, count) = mask_run(text, tail);
    if count < MIN_MASK_RUN {
        return None;
    }
    let key = key.as_bytes();
    let longest = (key.len() - 4).min(mask);
    (MIN_MASKED_PREFIX..=longest).rev().find(|&n| text[mask - n..mask] == key[..n]).map(|n| mask - n)
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

    /// A test-only base64 (padded or not), written out independently of
    /// the scrubber's core computation.
    fn b64(bytes: &[u8], alphabet: &[u8; 64], pad: bool) -> String {
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            let chars = chunk.len() + 1;
            for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
                if i < chars {
                    out.push(alphabet[((n >> shift) & 63) as usize] as char);
                } else if pad {
                    out.push('=');
                }
            }
        }
        out
    }

    /// Every base64 form of the key (alone, after `Bearer `, as a Basic
    /// `user:KEY` or `KEY:`, both alphabets, with and without padding) is
    /// scrubbed, in the middle of a sentence and inside a JSON string, and
    /// the JSON stays valid.
    #[test]
    fn redactor_scrubs_base64_echoes() {
        let key = "sk-live-0123456789abcdef";
        let r = Redactor::new([Secret::new(key)]);
        for wrapped in
            [key.to_owned(), format!("Bearer {key}"), format!("user:{key}"), format!("{key}:"), format!(":{key}")]
        {
            for alphabet in [STANDARD, URL_SAFE] {
                for pad in [true, false] {
                    let enc = b64(wrapped.as_bytes(), alphabet, pad);
                    let text = format!("header was Basic {enc} (echoed)");
                    let out = r.scrub(&text);
                    assert_eq!(out, "header was Basic [redacted] (echoed)", "{wrapped:?} as {enc}");
                    let json = serde_json::json!({"content": format!("line\n{enc}\u{e9}")}).to_string();
                    let scrubbed = r.scrub_bytes(json.as_bytes()).into_owned();
                    let back: serde_json::Value = serde_json::from_slice(&scrubbed).unwrap();
                    assert_eq!(back["content"], "line\n[redacted]\u{e9}", "{wrapped:?} as {enc}");
                }
            }
        }
        let clean = r.scrub_bytes(b"nothing secret here, c2stbGl2ZQ== is just sk-live");
        assert!(matches!(clean, std::borrow::Cow::Borrowed(_)), "a clean text is not copied");
    }

    /// Masked echoes (`sk-proj-****wxyz`, `sk-ab...wxyz`, `sk…wxyz`) are
    /// scrubbed; the last four alone, or behind too few mask characters,
    /// or with a start that is not the key's, are ordinary text.
    #[test]
    fn redactor_scrubs_masked_echoes() {
        let key = "sk-proj-0123456789abcdwxyz";
        let r = Redactor::new([Secret::new(key)]);
        for masked in ["sk-proj-********************wxyz", "sk-pr...wxyz", "sk…wxyz", "sk-proj-****...wxyz"] {
            let out = r.scrub(&format!("Incorrect API key provided: {masked}. Check it."));
            assert_eq!(out, "Incorrect API key provided: [redacted]. Check it.", "{masked}");
        }
        for plain in ["ends in wxyz", "sk.wxyz", "ab-cd...wxyz", "sk-pr...wxyzz", "sk-pr...wxyz9"] {
            assert_eq!(r.scrub(plain), plain);
        }
        let json = serde_json::json!({"msg": "key \"sk-pr***wxyz\"\n"}).to_string();
        let back: serde_json::Value = serde_json::from_slice(&r.scrub_bytes(json.as_bytes())).unwrap();
        assert_eq!(back["msg"], "key \"[redacted]\"\n");
    }

    /// The cost of scrubbing a clean 2 kB JSON body with three secrets,
    /// printed (not asserted: a figure, not a test of speed).
    #[test]
    fn redactor_cost_of_a_clean_body() {
        let r = Redactor::new([
            Secret::new("sk-upstream-0123456789abcdef"),
            Secret::new("team-a-key-8d2e61b0"),
            Secret::new("team-b-key-19c4f5e3"),
        ]);
        let body = serde_json::json!({"choices": [{"message": {"content": "Claim 1: YES\n".repeat(150)}}]}).to_string();
        let rounds = 20_000u32;
        let started = std::time::Instant::now();
        for _ in 0..rounds {
            assert!(matches!(r.scrub_bytes(std::hint::black_box(body.as_bytes())), std::borrow::Cow::Borrowed(_)));
        }
        let each = started.elapsed() / rounds;
        println!("scrub of a clean {}-byte body, 3 secrets ({} needles): {each:?} each", body.len(), r.needles.len());
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
