//! The run order, algorithm v1. Written out in full so that anyone can
//! re-derive a cohort's order from this documentation alone (and
//! `scripts/rederive_order.py` does, with nothing but Python's standard
//! library).
//!
//! 1. **Canonical list.** For each question in file order, for each arm in
//!    config order, for each repeat `1..=R`: the run id
//!    `{question_id}:{arm_id}:{repeat}`.
//! 2. **Key.** `SHA-256("cohort-order-v1:" ++ decimal ASCII of the seed)`.
//! 3. **Keystream.** ChaCha20 as in RFC 8439 with that key, a 12-byte
//!    all-zero nonce and the block counter starting at 0; the output bytes
//!    are read as successive little-endian `u64` words.
//! 4. **Fisher-Yates.** For `i` from `n-1` down to `1`: `bound = i+1`; draw
//!    words `x` until `x < 2^64 - (2^64 mod bound)` (rejection sampling, so
//!    every `j` is equally likely); `j = x mod bound`; swap positions `i`
//!    and `j`.
//!
//! The ChaCha20 block function is written here rather than taken from a
//! library so that the algorithm cannot change under us with a dependency
//! update; it is checked against the RFC 8439 section 2.3.2 test vector.

use std::fmt;

use crate::hash::sha256;

/// The name of this algorithm, recorded in every manifest.
pub const ORDER_ALGORITHM: &str = "cohort-order-v1";

/// A planned run: one question, one arm, one repeat.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunId {
    pub question_id: String,
    pub arm_id: String,
    /// 1-based.
    pub repeat: u32,
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.question_id, self.arm_id, self.repeat)
    }
}

impl RunId {
    /// Parses `{question_id}:{arm_id}:{repeat}`: the one place a run id
    /// string is taken apart (ledgers, coordinator, worker all call it).
    pub fn parse(s: &str) -> Result<RunId, RunIdError> {
        let (q, a, repeat) = RunId::split(s)?;
        Ok(RunId { question_id: q.to_owned(), arm_id: a.to_owned(), repeat })
    }

    /// [`RunId::parse`] without copying: the question id, the arm id and
    /// the repeat, borrowed from `s` (for hot loops such as seeding).
    pub fn split(s: &str) -> Result<(&str, &str, u32), RunIdError> {
        let bad = |why: &'static str| RunIdError { id: s.chars().take(200).collect(), why };
        let mut parts = s.split(':');
        let (Some(q), Some(a), Some(r)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad("it has fewer than three ':'-separated parts"));
        };
        if parts.next().is_some() {
            return Err(bad("it has more than three ':'-separated parts"));
        }
        if q.is_empty() || a.is_empty() {
            return Err(bad("its question or arm id is empty"));
        }
        let repeat: u32 =
            r.parse().ok().filter(|&r| r >= 1).ok_or_else(|| bad("its repeat is not a whole number from 1"))?;
        Ok((q, a, repeat))
    }
}

/// A run id that is not `{question_id}:{arm_id}:{repeat}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("run id {id:?} is not question:arm:repeat: {why}")]
pub struct RunIdError {
    /// The id as given (its first 200 characters).
    pub id: String,
    pub why: &'static str,
}

/// The cohort's run order: the canonical list, shuffled with the seed.
///
/// Question and arm ids must already be valid (no `:`, no whitespace);
/// validation of the cohort guarantees that.
pub fn run_order<Q: AsRef<str>, A: AsRef<str>>(questions: &[Q], arms: &[A], repeats: u32, seed: u64) -> Vec<RunId> {
    let per_question = arms.len() * repeats as usize;
    let mut positions: Vec<usize> = (0..questions.len() * per_question).collect();
    shuffle(&mut positions, seed);
    positions
        .into_iter()
        .map(|p| {
            let (q, rest) = (p / per_question, p % per_question);
            let (a, r) = (rest / repeats as usize, rest % repeats as usize);
            RunId {
                question_id: questions[q].as_ref().to_owned(),
                arm_id: arms[a].as_ref().to_owned(),
                repeat: r as u32 + 1,
            }
        })
        .collect()
}

/// The SHA-256 (lowercase hex) of an order: each run id followed by `\n`.
pub fn order_sha256(order: &[RunId]) -> String {
    use sha2::{Digest, Sha256};
    use std::fmt::Write as _;
    let mut hasher = Sha256::new();
    let mut line = String::new();
    for run in order {
        line.clear();
        // Writing to a String cannot fail.
        let _ = writeln!(line, "{run}");
        hasher.update(line.as_bytes());
    }
    hex::encode(hasher.finalize())
}

/// Shuffles `items` in place with Fisher-Yates over the seed's keystream.
pub fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut stream = KeyStream::for_seed(seed);
    for i in (1..items.len()).rev() {
        let j = stream.below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

/// The ChaCha20 keystream of a seed, read as little-endian `u64` words.
#[derive(Debug)]
pub struct KeyStream {
    key: [u8; 32],
    /// All zero for the run order; the bootstrap gives each draw its own.
    nonce: [u8; 12],
    counter: u32,
    block: [u8; 64],
    /// Next unread byte of `block`; 64 means "refill first".
    position: usize,
}

impl KeyStream {
    /// The keystream of algorithm v1 for `seed`.
    pub fn for_seed(seed: u64) -> KeyStream {
        let key = sha256(format!("{ORDER_ALGORITHM}:{seed}").as_bytes());
        KeyStream { key, nonce: [0; 12], counter: 0, block: [0; 64], position: 64 }
    }

    /// The keystream of draw `draw` under `key`: nonce = `draw` as 4
    /// little-endian bytes and 8 zero bytes, block counter from 0. The
    /// cluster bootstrap (`crate::stats`) and the calibration bootstrap
    /// (`crate::agreement`) read one per draw.
    pub(crate) fn for_draw(key: &[u8; 32], draw: u32) -> KeyStream {
        let mut nonce = [0u8; 12];
        nonce[..4].copy_from_slice(&draw.to_le_bytes());
        KeyStream { key: *key, nonce, counter: 0, block: [0; 64], position: 64 }
    }

    /// The next little-endian `u64` word. A block holds exactly eight words,
    /// so a word never straddles two blocks.
    pub fn next_u64(&mut self) -> u64 {
        if self.position == 64 {
            self.block = chacha20_block(&self.key, self.counter, &self.nonce);
            // 2^32 blocks is 256 GiB of keystream: far beyond any cohort.
            self.counter = self.counter.wrapping_add(1);
            self.position = 0;
        }
        let mut word = [0; 8];
        word.copy_from_slice(&self.block[self.position..self.position + 8]);
        self.position += 8;
        u64::from_le_bytes(word)
    }

    /// A uniform draw from `0..bound` by rejection sampling: words at or
    /// above `2^64 - (2^64 mod bound)` are discarded.
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "bound must be positive");
        // 2^64 mod bound, computed without 128-bit arithmetic.
        let rem = (u64::MAX % bound + 1) % bound;
        loop {
            let x = self.next_u64();
            // When rem is 0 every word is accepted; otherwise the limit is
            // 2^64 - rem, which wraps to exactly that in u64.
            if rem == 0 || x < 0u64.wrapping_sub(rem) {
                return x % bound;
            }
        }
    }
}

/// The ChaCha20 block function of RFC 8439 section 2.3.
pub fn chacha20_block(key: &[u8; 32], counter: u32, nonce: &[u8; 12]) -> [u8; 64] {
    let word = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let mut state = [0u32; 16];
    state[..4].copy_from_slice(&[0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574]);
    for i in 0..8 {
        state[4 + i] = word(&key[4 * i..]);
    }
    state[12] = counter;
    for i in 0..3 {
        state[13 + i] = word(&nonce[4 * i..]);
    }
    let mut working = state;
    for _ in 0..10 {
        quarter_round(&mut working, 0, 4, 8, 12);
        quarter_round(&mut working, 1, 5, 9, 13);
        quarter_round(&mut working, 2, 6, 10, 14);
        quarter_round(&mut working, 3, 7, 11, 15);
        quarter_round(&mut working, 0, 5, 10, 15);
        quarter_round(&mut working, 1, 6, 11, 12);
        quarter_round(&mut working, 2, 7, 8, 13);
        quarter_round(&mut working, 3, 4, 9, 14);
    }
    let mut out = [0u8; 64];
    for i in 0..16 {
        out[4 * i..4 * i + 4].copy_from_slice(&working[i].wrapping_add(state[i]).to_le_bytes());
    }
    out
}

fn quarter_round(s: &mut [u32; 16], a: usize, b: usize, c: usize, d: usize) {
    s[a] = s[a].wrapping_add(s[b]);
    s[d] = (s[d] ^ s[a]).rotate_left(16);
    s[c] = s[c].wrapping_add(s[d]);
    s[b] = (s[b] ^ s[c]).rotate_left(12);
    s[a] = s[a].wrapping_add(s[b]);
    s[d] = (s[d] ^ s[a]).rotate_left(8);
    s[c] = s[c].wrapping_add(s[d]);
    s[b] = (s[b] ^ s[c]).rotate_left(7);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// RFC 8439 section 2.3.2: key 00..1f, counter 1, nonce 00 00 00 09 00 00
    /// 00 4a 00 00 00 00; the serialized block of the RFC.
    #[test]
    fn block_function_matches_rfc_8439_2_3_2() {
        let key: [u8; 32] = std::array::from_fn(|i| i as u8);
        let nonce = [0, 0, 0, 0x09, 0, 0, 0, 0x4a, 0, 0, 0, 0];
        let expected = "10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e\
                        d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e";
        assert_eq!(hex::encode(chacha20_block(&key, 1, &nonce)), expected);
    }

    /// The keystream key is SHA-256 of "cohort-order-v1:42".
    #[test]
    fn keystream_is_keyed_by_the_documented_string() {
        let stream = KeyStream::for_seed(42);
        assert_eq!(stream.key, sha256(b"cohort-order-v1:42"));
    }

    /// A fixed expected order, produced independently by
    /// `scripts/rederive_order.py` (pure-Python ChaCha20 and Fisher-Yates):
    /// questions q1..q4, arms a and b, 2 repeats, seed 20261014.
    #[test]
    fn order_matches_the_independent_python_derivation() {
        let order = run_order(&["q1", "q2", "q3", "q4"], &["a", "b"], 2, 20261014);
        let got: Vec<String> = order.iter().map(ToString::to_string).collect();
        let expected = EXPECTED_Q4_A2_R2_SEED_20261014;
        assert_eq!(got, expected);
    }

    const EXPECTED_Q4_A2_R2_SEED_20261014: [&str; 16] = include!("order_fixture.in");

    #[test]
    fn run_ids_round_trip() {
        let id = RunId { question_id: "science-1".into(), arm_id: "perplexity".into(), repeat: 3 };
        assert_eq!(RunId::parse(&id.to_string()), Ok(id));
        assert_eq!(RunId::split("science-1:perplexity:3"), Ok(("science-1", "perplexity", 3)));
        for bad in ["a:b", "a:b:0", "a:b:1:2", ":b:1", "a::1", "a:b:x", "a:b:-1", ""] {
            let e = RunId::parse(bad).expect_err(bad);
            assert!(e.to_string().starts_with(&format!("run id {bad:?} is not question:arm:repeat: ")), "{e}");
        }
    }

    #[test]
    fn below_is_in_range_and_uses_every_value() {
        let mut stream = KeyStream::for_seed(7);
        let mut seen = [false; 6];
        for _ in 0..600 {
            let x = stream.below(6);
            seen[x as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(stream.below(1), 0);
    }

    proptest! {
        /// For any ids and any seed the order is a permutation of the
        /// canonical list, and the same inputs give the same order.
        #[test]
        fn order_is_a_deterministic_permutation(
            questions in proptest::collection::btree_set("[a-z0-9-]{1,8}", 0..12),
            arms in proptest::collection::btree_set("[a-z_]{1,6}", 1..4),
            repeats in 1u32..4,
            seed in any::<u64>(),
        ) {
            let questions: Vec<String> = questions.into_iter().collect();
            let arms: Vec<String> = arms.into_iter().collect();
            let order = run_order(&questions, &arms, repeats, seed);
            let again = run_order(&questions, &arms, repeats, seed);
            prop_assert_eq!(&order, &again);
            let mut canonical = Vec::new();
            for q in &questions {
                for a in &arms {
                    for r in 1..=repeats {
                        canonical.push(RunId { question_id: q.clone(), arm_id: a.clone(), repeat: r });
                    }
                }
            }
            let mut sorted = order.clone();
            sorted.sort();
            canonical.sort();
            prop_assert_eq!(sorted, canonical);
        }

        /// Different seeds give different orders (for lists long enough that
        /// a collision would be a bug, not chance).
        #[test]
        fn seeds_matter(seed in any::<u64>()) {
            let q: Vec<String> = (0..20).map(|i| format!("q{i}")).collect();
            let a = run_order(&q, &["x"], 1, seed);
            let b = run_order(&q, &["x"], 1, seed.wrapping_add(1));
            prop_assert_ne!(a, b);
        }
    }
}
