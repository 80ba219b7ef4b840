//! Canonical JSON (RFC 8785 / JCS) and SHA-256 digests: what versions a tool and what an
//! approval binds.

use serde_json::Value;
use sha2::{Digest, Sha256};
use toolgate_crds::ToolDescriptorSpec;

/// A value could not be canonicalized (a float that is not finite, say).
#[derive(Debug, thiserror::Error)]
#[error("cannot canonicalize JSON: {0}")]
pub struct CanonicalizeError(#[from] serde_json::Error);

/// The RFC 8785 canonical form of a JSON value.
pub fn canonical_json<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, CanonicalizeError> {
    Ok(serde_json_canonicalizer::to_vec(value)?)
}

/// `sha256:<hex>` of bytes.
pub fn sha256(bytes: &[u8]) -> String {
    prefixed_hex(&Sha256::digest(bytes).into())
}

/// `sha256:` and the hex of a digest, in one allocation (digests are made on every decision).
fn prefixed_hex(digest: &[u8; 32]) -> String {
    const PREFIX: &str = "sha256:";
    let mut hex = [0u8; 64];
    let mut out = String::with_capacity(PREFIX.len() + hex.len());
    out.push_str(PREFIX);
    // Neither can fail: 64 bytes take the hex of 32 exactly, and hex is ASCII.
    if hex::encode_to_slice(digest, &mut hex).is_ok()
        && let Ok(text) = std::str::from_utf8(&hex)
    {
        out.push_str(text);
    }
    out
}

/// `sha256:` digest of the canonical form of a JSON value (args, specs).
pub fn json_digest<T: serde::Serialize>(value: &T) -> Result<String, CanonicalizeError> {
    Ok(sha256(&canonical_json(value)?))
}

/// `sha256:` digest of a call's args: [`json_digest`] of a `serde_json::Value`, canonicalized by
/// [`canonical_value`] (every decision digests its call's args).
pub fn args_digest(args: &Value) -> Result<String, CanonicalizeError> {
    args_digest_sized(args).0
}

/// The args digest and the length of the canonical form it hashed, in one pass: a decision
/// checks the args' size limit on the very bytes it digests.
pub fn args_digest_sized(args: &Value) -> (Result<String, CanonicalizeError>, usize) {
    // Hashed as it is written: no buffer of the whole canonical form.
    let mut hasher = HashWriter {
        sha: Sha256::new(),
        len: 0,
    };
    match write_canonical(&mut hasher, args) {
        Ok(()) => (Ok(prefixed_hex(&hasher.sha.finalize().into())), hasher.len),
        Err(e) => (Err(e), usize::MAX),
    }
}

/// The length of a value's canonical form, counted as it is written (`usize::MAX` for a value
/// that has none).
pub fn canonical_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match write_canonical(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

/// Feeds what is written to a SHA-256, counting the bytes.
struct HashWriter {
    sha: Sha256,
    len: usize,
}

impl std::io::Write for HashWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.sha.update(bytes);
        self.len += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The RFC 8785 form of a `serde_json::Value`, written in one pass: what [`canonical_json`] gives
/// (a property test holds them equal), without the generic canonicalizer's buffering and
/// re-parsing of every property name, which was a third of a decision's time.
pub fn canonical_value(value: &Value) -> Result<Vec<u8>, CanonicalizeError> {
    let mut out = Vec::with_capacity(64);
    write_canonical(&mut out, value)?;
    Ok(out)
}

fn write_canonical<W: std::io::Write>(out: &mut W, value: &Value) -> Result<(), CanonicalizeError> {
    match value {
        Value::Null => put(out, b"null")?,
        Value::Bool(b) => put(out, if *b { b"true" } else { b"false" })?,
        Value::Number(n) => {
            // Every JSON number is a double, written as ECMAScript's Number.prototype.toString.
            let f = n.as_f64().filter(|f| f.is_finite()).ok_or_else(|| {
                <serde_json::Error as serde::ser::Error>::custom(format!(
                    "{n} is not a finite double"
                ))
            })?;
            put(out, ryu_js::Buffer::new().format_finite(f).as_bytes())?;
        }
        // serde_json escapes exactly what RFC 8785 does (quote, backslash, control characters,
        // the short forms where JSON has them, lowercase \u00xx otherwise) and nothing else.
        Value::String(s) => serde_json::to_writer(&mut *out, s)?,
        Value::Array(items) => {
            put(out, b"[")?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    put(out, b",")?;
                }
                write_canonical(out, item)?;
            }
            put(out, b"]")?;
        }
        Value::Object(map) => {
            // Most objects come in order already (small args, sorted by their writer): only
            // the others are sorted, in a list of their properties.
            let in_order = map
                .keys()
                .is_sorted_by(|a, b| utf16_order(a, b) != std::cmp::Ordering::Greater);
            if in_order {
                write_properties(out, map.iter())?;
            } else {
                let mut properties: Vec<(&String, &Value)> = map.iter().collect();
                properties.sort_unstable_by(|a, b| utf16_order(a.0, b.0));
                write_properties(out, properties.into_iter())?;
            }
        }
    }
    Ok(())
}

fn put<W: std::io::Write>(out: &mut W, bytes: &[u8]) -> Result<(), CanonicalizeError> {
    Ok(out.write_all(bytes).map_err(serde_json::Error::io)?)
}

fn write_properties<'v, W: std::io::Write>(
    out: &mut W,
    properties: impl Iterator<Item = (&'v String, &'v Value)>,
) -> Result<(), CanonicalizeError> {
    put(out, b"{")?;
    for (i, (name, item)) in properties.enumerate() {
        if i > 0 {
            put(out, b",")?;
        }
        serde_json::to_writer(&mut *out, name)?;
        put(out, b":")?;
        write_canonical(out, item)?;
    }
    put(out, b"}")?;
    Ok(())
}

/// RFC 8785 orders property names by their UTF-16 code units. Below U+E000 that is the order of
/// their UTF-8 bytes; a byte from 0xEE up starts a character where the two differ.
fn utf16_order(a: &str, b: &str) -> std::cmp::Ordering {
    if a.bytes().chain(b.bytes()).all(|c| c < 0xEE) {
        a.cmp(b)
    } else {
        a.encode_utf16().cmp(b.encode_utf16())
    }
}

/// The content digest that versions a tool: the canonical descriptor spec's SHA-256.
pub fn descriptor_digest(spec: &ToolDescriptorSpec) -> Result<String, CanonicalizeError> {
    json_digest(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn digests_are_prefixed_lowercase_hex() {
        assert_eq!(
            sha256(b"abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a: serde_json::Value = serde_json::from_str(r#"{"b": 1, "a": [1, 2]}"#).unwrap();
        let b: serde_json::Value = serde_json::from_str(r#"{ "a":[1,2],"b":1 }"#).unwrap();
        assert_eq!(json_digest(&a).unwrap(), json_digest(&b).unwrap());
        assert_ne!(
            json_digest(&a).unwrap(),
            json_digest(&json!({"a": [2, 1], "b": 1})).unwrap()
        );
    }

    #[test]
    fn the_args_digest_hashes_every_byte() {
        for n in [0, 1, 63, 64, 65, 255, 256, 257, 600, 2000] {
            let v =
                json!({"a": "x".repeat(n), "b": ["y".repeat(n / 3), n], "c": {"d": "z".repeat(n)}});
            let canonical = canonical_value(&v).unwrap();
            assert_eq!(args_digest(&v).unwrap(), sha256(&canonical), "{n}");
            let (digest, len) = args_digest_sized(&v);
            assert_eq!(
                (digest.unwrap(), len, canonical_len(&v)),
                (sha256(&canonical), canonical.len(), canonical.len()),
                "{n}"
            );
        }
    }

    #[test]
    fn canonical_form_follows_rfc8785() {
        let v = json!({"b": 1.0, "a": "\u{20ac}", "c": 1e21});
        assert_eq!(
            String::from_utf8(canonical_json(&v).unwrap()).unwrap(),
            r#"{"a":"€","b":1,"c":1e+21}"#
        );
    }
}
