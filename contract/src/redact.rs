//! Redaction of credential values from everything a model or a log may see (invariant 7).
//!
//! A known value (the credential a call was given) is removed in the forms a tool can produce
//! without trying: as is, reversed, base64 and base64url at any alignment with or without
//! padding, percent-encoded, as JSON/C escapes, in hex of either case, and spread out by
//! separators (`c.a.n.a.r.y`, `xxd`'s groups, a wrapped `base64`). The last kind is matched on the
//! text's letters and digits alone, and a long value's every run of [`FRAGMENT`] letters and
//! digits counts, so a value cut across lines (`xxd`'s columns) loses all but its ends. Common
//! token shapes are replaced without being told. The streaming form holds back a window of bytes
//! so a secret split across two chunks is still caught.

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

/// The shortest run of a known value's letters and digits that is redacted on its own: shorter
/// runs would match ordinary text, longer ones would let a value cut across lines through.
pub const FRAGMENT: usize = 8;

/// Removes known secrets and credential shapes from text and bytes.
#[derive(Debug, Clone)]
pub struct Redactor {
    /// The known values' encodings, matched byte for byte.
    exact: Option<AhoCorasick>,
    /// The known values' letters and digits (and those of their hex and base64), matched on the
    /// text's letters and digits alone, ignoring case.
    spread: Option<AhoCorasick>,
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
        let mut exact: Vec<Vec<u8>> = Vec::new();
        let mut spread: Vec<Vec<u8>> = Vec::new();
        let mut longest = 0;
        for s in secrets {
            let trimmed = s.as_ref().trim_ascii();
            if trimmed.len() < MIN_SECRET_LEN {
                continue;
            }
            // The widest form is a `\uXXXX` escape per byte.
            longest = longest.max(trimmed.len() * 6);
            exact_forms(trimmed, &mut exact);
            spread_forms(trimmed, &mut spread);
        }
        let build = |mut needles: Vec<Vec<u8>>, kind: MatchKind, fold: bool| {
            needles.sort();
            needles.dedup();
            (!needles.is_empty())
                .then(|| {
                    AhoCorasick::builder()
                        .match_kind(kind)
                        .ascii_case_insensitive(fold)
                        // A few hundred needles at most: the DFA's memory is small and it is
                        // the fastest search of a tool's whole output.
                        .kind(Some(aho_corasick::AhoCorasickKind::DFA))
                        .build(&needles)
                        .ok()
                })
                .flatten()
        };
        Redactor {
            exact: build(exact, MatchKind::LeftmostLongest, false),
            // Standard matching, so every overlapping run is found and their union redacted.
            spread: build(spread, MatchKind::Standard, true),
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
        if let Some(ac) = &self.spread {
            let letters: Vec<u8> = bytes
                .iter()
                .copied()
                .filter(u8::is_ascii_alphanumeric)
                .collect();
            let found: Vec<(usize, usize)> = ac
                .find_overlapping_iter(&letters)
                .map(|m| (m.start(), m.end()))
                .collect();
            // Where each letter is in `bytes`, worked out only when something matched (rare).
            if !found.is_empty() {
                let at = letters_and_digits(bytes).1;
                all.extend(found.into_iter().map(|(start, end)| Match {
                    start: at[start],
                    end: at[end - 1] + 1,
                    label: None,
                }));
            }
        }
        for (shape, re) in self.shapes {
            all.extend(shape.find_iter(re, bytes).map(|r| Match {
                start: r.start,
                end: r.end,
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

/// The forms of a value matched byte for byte: as is, reversed, base64 and base64url (padded,
/// unpadded, and the part that stays the same whatever bytes come before or after it), percent-
/// encoded, and escaped as JSON (`\u0063`, `\/`) or C (`\x63`) would.
fn exact_forms(value: &[u8], out: &mut Vec<Vec<u8>>) {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};
    out.push(value.to_vec());
    out.push(value.iter().rev().copied().collect());
    for engine in [STANDARD, URL_SAFE] {
        let padded = engine.encode(value);
        out.push(padded.trim_end_matches('=').as_bytes().to_vec());
        out.push(padded.into_bytes());
    }
    out.extend(base64_cores(value));
    let pct = percent_encode(value);
    if pct != value {
        out.push(pct);
    }
    for (prefix, width, upper) in [("\\u", 4, false), ("\\u", 4, true), ("\\x", 2, false)] {
        let mut escaped = String::new();
        for &b in value {
            escaped.push_str(prefix);
            if upper {
                escaped.push_str(&format!("{b:0width$X}"));
            } else {
                escaped.push_str(&format!("{b:0width$x}"));
            }
        }
        out.push(escaped.into_bytes());
    }
    if value.contains(&b'/') {
        let mut slashed = Vec::with_capacity(value.len() + 4);
        for &b in value {
            if b == b'/' {
                slashed.push(b'\\');
            }
            slashed.push(b);
        }
        out.push(slashed);
    }
}

/// The base64 and base64url characters that encode only `value`'s bytes, for each of the three
/// places it can start within a group of three: what a longer text holding the value encodes to
/// always contains one of them. Short values are left out (a few characters match too often).
fn base64_cores(value: &[u8]) -> Vec<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    if value.len() < 2 * MIN_SECRET_LEN {
        return Vec::new();
    }
    let mut cores = Vec::new();
    for shift in 0..3usize {
        let mut shifted = vec![0u8; shift];
        shifted.extend_from_slice(value);
        // Characters before `skip` carry bits of the bytes before the value; the last one carries
        // bits of the byte after it unless the value ends a group.
        let skip = [0, 2, 3][shift];
        let tail = usize::from(shifted.len() % 3 != 0);
        for engine in [STANDARD_NO_PAD, URL_SAFE_NO_PAD] {
            let encoded = engine.encode(&shifted).into_bytes();
            if encoded.len() > skip + tail {
                cores.push(encoded[skip..encoded.len() - tail].to_vec());
            }
        }
    }
    cores
}

/// The forms of a value matched on letters and digits alone (ignoring case): its own, reversed,
/// its hex and its base64; a long one also by every run of [`FRAGMENT`] of them (hex: twice as
/// many digits), so a value cut across lines is caught piece by piece.
fn spread_forms(value: &[u8], out: &mut Vec<Vec<u8>>) {
    let own = letters_and_digits(value).0;
    let reversed: Vec<u8> = own.iter().rev().copied().collect();
    let hex = hex::encode(value).into_bytes();
    for (form, run) in [(own, FRAGMENT), (reversed, FRAGMENT), (hex, 2 * FRAGMENT)] {
        if form.len() < FRAGMENT {
            continue;
        }
        if form.len() >= 2 * run {
            out.extend(form.windows(run).map(<[u8]>::to_vec));
        }
        out.push(form);
    }
    for core in base64_cores(value) {
        let letters = letters_and_digits(&core).0;
        if letters.len() >= FRAGMENT {
            out.push(letters);
        }
    }
}

/// The ASCII letters and digits of `bytes`, and where each one is in `bytes`.
fn letters_and_digits(bytes: &[u8]) -> (Vec<u8>, Vec<usize>) {
    bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| b.is_ascii_alphanumeric())
        .map(|(i, b)| (*b, i))
        .unzip()
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

    /// What a tool can print its credential as without trying, each of which must go.
    fn encodings(value: &str) -> Vec<(&'static str, String)> {
        use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE_NO_PAD};
        let bytes = value.as_bytes();
        let hex = hex::encode(bytes);
        let json: String = value
            .chars()
            .map(|c| format!("\\u{:04x}", c as u32))
            .collect();
        let xxd_like: String = bytes
            .chunks(16)
            .enumerate()
            .map(|(i, line)| {
                let groups: Vec<String> = line.chunks(2).map(hex::encode).collect();
                format!(
                    "{:08x}: {:<40}  {}\n",
                    i * 16,
                    groups.join(" "),
                    String::from_utf8_lossy(line)
                )
            })
            .collect();
        vec![
            ("raw", value.to_string()),
            ("hex", hex.clone()),
            ("HEX", hex.to_uppercase()),
            (
                "hex with colons",
                hex.as_bytes()
                    .chunks(2)
                    .map(|c| String::from_utf8_lossy(c).into_owned())
                    .collect::<Vec<_>>()
                    .join(":"),
            ),
            ("reversed", value.chars().rev().collect()),
            ("base64", STANDARD.encode(bytes)),
            ("base64 unpadded", STANDARD_NO_PAD.encode(bytes)),
            ("base64url", URL_SAFE_NO_PAD.encode(bytes)),
            (
                "base64 of a header",
                STANDARD.encode(format!("Authorization: Bearer {value}")),
            ),
            (
                "base64 of a header, offset",
                STANDARD.encode(format!("Bearer: {value}\n")),
            ),
            (
                "percent, every byte",
                bytes.iter().map(|b| format!("%{b:02X}")).collect(),
            ),
            ("json escapes", json),
            (
                "dot separated",
                value
                    .chars()
                    .map(String::from)
                    .collect::<Vec<_>>()
                    .join("."),
            ),
            (
                "space separated",
                value
                    .chars()
                    .map(String::from)
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            (
                "xxd -p wrapped",
                hex.as_bytes()
                    .chunks(10)
                    .map(|c| String::from_utf8_lossy(c).into_owned())
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
            ("xxd", xxd_like),
        ]
    }

    #[test]
    fn every_easy_encoding_of_a_known_value_is_removed() {
        let r = Redactor::new([CANARY]);
        for (name, encoded) in encodings(CANARY) {
            let text = format!("before {encoded} after");
            let out = r.redact_str(&text);
            assert!(out.contains("[REDACTED]"), "{name}: {out}");
            assert!(
                out.starts_with("before ") && out.ends_with(" after"),
                "{name}: {out}"
            );
            // No run of the value's letters and digits long enough to mean anything is left.
            let own = letters_and_digits(CANARY.as_bytes()).0;
            let left = letters_and_digits(out.as_bytes()).0;
            for run in own.windows(FRAGMENT) {
                assert!(
                    !left
                        .to_ascii_lowercase()
                        .windows(FRAGMENT)
                        .any(|w| w == run.to_ascii_lowercase()),
                    "{name}: {out}"
                );
            }
        }
    }

    proptest::proptest! {
        /// Any credential, in any easy encoding, anywhere in a tool's output, streamed in any
        /// chunks: no run of its letters and digits long enough to mean anything survives.
        #[test]
        fn no_easy_encoding_of_any_credential_survives(
            value in "[A-Za-z0-9]{6,20}[-_.:/+]?[A-Za-z0-9]{6,24}",
            which in 0usize..16,
            before in "[a-z ,.:\n]{0,80}",
            after in "[a-z ,.:\n]{0,80}",
            chunk in 1usize..64,
        ) {
            let r = Redactor::new([value.as_str()]);
            let all = encodings(&value);
            let (name, encoded) = &all[which % all.len()];
            let text = format!("{before}{encoded}{after}");
            let mut s = r.stream();
            let mut out = Vec::new();
            for piece in text.as_bytes().chunks(chunk) {
                out.extend(s.push(piece));
            }
            out.extend(s.finish());
            proptest::prop_assert_eq!(&out, &r.redact_bytes(text.as_bytes()));
            let left = letters_and_digits(&out).0.to_ascii_lowercase();
            let own = letters_and_digits(value.as_bytes()).0.to_ascii_lowercase();
            for run in own.windows(FRAGMENT) {
                proptest::prop_assert!(
                    !left.windows(FRAGMENT).any(|w| w == run),
                    "{}: {}", name, String::from_utf8_lossy(&out)
                );
            }
        }
    }

    #[test]
    fn ordinary_text_around_a_known_value_survives() {
        let r = Redactor::new([CANARY]);
        let text = "the build at 6b599ad passed; see https://example.test/a?b=c";
        assert_eq!(r.redact_str(text), text);
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
