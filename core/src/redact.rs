//! Redaction of credential values from everything a model or a log may see (invariant 7).
//!
//! Known values (the credential a call was given, and its base64 and percent-encoded forms) are
//! replaced exactly; common token shapes are replaced too. The streaming form holds back a window
//! of bytes so a secret split across two chunks is still caught.

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine;
use regex::bytes::Regex;

use crate::secrets::{SecretShape, compiled_shapes};

/// What a known credential value becomes.
pub const REDACTED: &str = "[REDACTED]";

/// Values shorter than this are not redacted exactly: they would match ordinary text.
pub const MIN_SECRET_LEN: usize = 6;

/// How far back the streaming redactor looks for a token shape split across chunks.
const SHAPE_WINDOW: usize = 4096;

/// Removes known secrets and credential shapes from text and bytes.
#[derive(Debug, Clone)]
pub struct Redactor {
    exact: Option<AhoCorasick>,
    longest: usize,
    /// The credential shapes, compiled once per process ([`compiled_shapes`]).
    shapes: &'static [(SecretShape, Regex)],
}

impl Default for Redactor {
    fn default() -> Self {
        Redactor::new(std::iter::empty::<&[u8]>())
    }
}

impl Redactor {
    /// A redactor for these known values (plus the common token shapes).
    pub fn new<S: AsRef<[u8]>>(secrets: impl IntoIterator<Item = S>) -> Self {
        let mut needles: Vec<Vec<u8>> = Vec::new();
        for s in secrets {
            let raw = s.as_ref();
            let trimmed = raw.trim_ascii();
            if trimmed.len() < MIN_SECRET_LEN {
                continue;
            }
            needles.push(trimmed.to_vec());
            needles.push(
                base64::engine::general_purpose::STANDARD
                    .encode(trimmed)
                    .into_bytes(),
            );
            needles.push(
                base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .encode(trimmed)
                    .into_bytes(),
            );
            let pct = percent_encode(trimmed);
            if pct != trimmed {
                needles.push(pct);
            }
        }
        needles.sort();
        needles.dedup();
        let longest = needles.iter().map(Vec::len).max().unwrap_or(0);
        let exact = (!needles.is_empty())
            .then(|| {
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(&needles)
                    .ok()
            })
            .flatten();
        Redactor {
            exact,
            longest,
            shapes: compiled_shapes(),
        }
    }

    /// Compile the credential shapes now rather than at the first redactor: a process that waits
    /// for its work (an executor started ahead of its call) pays for them before the work comes.
    pub fn prepare() {
        compiled_shapes();
    }

    /// Redact a string.
    pub fn redact_str(&self, text: &str) -> String {
        String::from_utf8_lossy(&self.redact_bytes(text.as_bytes())).into_owned()
    }

    /// Redact bytes.
    pub fn redact_bytes(&self, bytes: &[u8]) -> Vec<u8> {
        let matches = self.matches(bytes);
        apply(bytes, &matches)
    }

    /// A streaming redactor over chunks.
    pub fn stream(&self) -> StreamRedactor<'_> {
        StreamRedactor {
            redactor: self,
            pending: Vec::new(),
        }
    }

    /// Bytes the stream holds back: a secret or shape is never longer than this.
    fn window(&self) -> usize {
        self.longest.max(SHAPE_WINDOW)
    }

    /// Non-overlapping matches, sorted, with their replacement.
    fn matches(&self, bytes: &[u8]) -> Vec<Match> {
        let mut all = Vec::new();
        if let Some(ac) = &self.exact {
            all.extend(ac.find_iter(bytes).map(|m| Match {
                start: m.start(),
                end: m.end(),
                label: None,
            }));
        }
        for (shape, re) in self.shapes {
            all.extend(re.find_iter(bytes).map(|m| Match {
                start: m.start(),
                end: m.end(),
                label: Some(shape.name),
            }));
        }
        all.sort_by_key(|m| (m.start, std::cmp::Reverse(m.end)));
        let mut merged: Vec<Match> = Vec::with_capacity(all.len());
        for m in all {
            match merged.last_mut() {
                Some(last) if m.start < last.end => {
                    if m.end > last.end {
                        last.end = m.end;
                    }
                }
                _ => merged.push(m),
            }
        }
        merged
    }
}

#[derive(Debug, Clone, Copy)]
struct Match {
    start: usize,
    end: usize,
    label: Option<&'static str>,
}

fn apply(bytes: &[u8], matches: &[Match]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    for m in matches {
        out.extend_from_slice(&bytes[at..m.start]);
        match m.label {
            Some(name) => out.extend_from_slice(format!("[REDACTED:{name}]").as_bytes()),
            None => out.extend_from_slice(REDACTED.as_bytes()),
        }
        at = m.end;
    }
    out.extend_from_slice(&bytes[at..]);
    out
}

fn percent_encode(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    out
}

/// Redacts a stream of chunks. Output lags input by at most the redactor's window.
#[derive(Debug)]
pub struct StreamRedactor<'a> {
    redactor: &'a Redactor,
    pending: Vec<u8>,
}

impl StreamRedactor<'_> {
    /// Feed a chunk; returns the redacted bytes that are safe to release.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(chunk);
        let keep = self.redactor.window();
        if self.pending.len() <= keep {
            return Vec::new();
        }
        let matches = self.redactor.matches(&self.pending);
        let mut cut = self.pending.len() - keep;
        for m in &matches {
            if m.start < cut && m.end > cut {
                // A match that touches the end may still grow with the next chunk: hold it back.
                cut = if m.end == self.pending.len() {
                    m.start
                } else {
                    m.end
                };
            }
        }
        let released: Vec<Match> = matches.into_iter().filter(|m| m.end <= cut).collect();
        let out = apply(&self.pending[..cut], &released);
        self.pending.drain(..cut);
        out
    }

    /// The rest, redacted.
    pub fn finish(self) -> Vec<u8> {
        self.redactor.redact_bytes(&self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CANARY: &str = "canary-7f3a9c1e-do-not-leak";

    #[test]
    fn known_values_and_their_encodings_are_removed() {
        let r = Redactor::new([CANARY]);
        let b64 = base64::engine::general_purpose::STANDARD.encode(CANARY);
        let text = format!(
            "token={CANARY} again {b64} url=a%20{}",
            String::from_utf8(percent_encode(b"x y")).unwrap()
        );
        let out = r.redact_str(&text);
        assert!(!out.contains(CANARY) && !out.contains(&b64), "{out}");
        assert!(
            out.starts_with("token=[REDACTED] again [REDACTED]"),
            "{out}"
        );
    }

    #[test]
    fn shapes_are_removed_without_being_told() {
        let out = Redactor::default().redact_str("key AKIAIOSFODNN7EXAMPLE end");
        assert_eq!(out, "key [REDACTED:aws-access-key-id] end");
    }

    #[test]
    fn short_values_are_ignored() {
        let r = Redactor::new(["abc", ""]);
        assert_eq!(r.redact_str("abc abc"), "abc abc");
    }

    #[test]
    fn a_secret_split_across_chunks_is_caught() {
        let r = Redactor::new([CANARY]);
        let text = format!("{}{CANARY}{}", "x".repeat(5000), "y".repeat(5000));
        for split in [1, 4999, 5000, 5003, 5010, 5020, 9000] {
            let mut s = r.stream();
            let mut out = s.push(&text.as_bytes()[..split]);
            out.extend(s.push(&text.as_bytes()[split..]));
            out.extend(s.finish());
            assert_eq!(out, r.redact_bytes(text.as_bytes()), "split at {split}");
        }
    }

    #[test]
    fn a_growing_token_is_held_back() {
        let r = Redactor::default();
        let token = format!("ghp_{}", "a".repeat(60));
        let text = format!("{} {token} tail", "z".repeat(SHAPE_WINDOW));
        let mut s = r.stream();
        let mut out = Vec::new();
        for chunk in text.as_bytes().chunks(7) {
            out.extend(s.push(chunk));
        }
        out.extend(s.finish());
        let out = String::from_utf8(out).unwrap();
        assert!(!out.contains("ghp_"), "{}", &out[out.len() - 80..]);
        assert!(out.ends_with("[REDACTED:github-token] tail"));
    }
}
