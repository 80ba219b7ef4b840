//! Text shown to people and models: characters that hide, reorder or repaint what is around them.
//!
//! A terminal runs the escape sequences a tool prints (clear the screen, set the title, hide the
//! next line); bidirectional controls make an approver read `txt.exe` where the file is
//! `exe.txt`; tag characters and variation selectors carry text no screen shows but a model
//! reads. What people and models are shown names these characters instead of passing them on;
//! free text a person sends (an intent, a comment) may not hold them at all. Stored output (an
//! artifact) keeps the bytes.

use std::borrow::Cow;
use std::fmt::Write as _;

/// What kind of hiding character `c` is, in words; `None` for ordinary text (emoji joiners and
/// the two emoji variation selectors included).
pub fn hidden_kind(c: char) -> Option<&'static str> {
    match c {
        '\u{202A}'..='\u{202E}'
        | '\u{2066}'..='\u{2069}'
        | '\u{200E}'
        | '\u{200F}'
        | '\u{061C}' => Some("a bidirectional control"),
        '\u{E0000}'..='\u{E007F}' => Some("a tag character"),
        '\u{FE00}'..='\u{FE0D}' | '\u{E0100}'..='\u{E01EF}' => Some("a variation selector"),
        '\u{200B}'
        | '\u{200C}'
        | '\u{2060}'..='\u{2064}'
        | '\u{FEFF}'
        | '\u{00AD}'
        | '\u{180E}' => Some("an invisible character"),
        '\u{115F}' | '\u{1160}' | '\u{3164}' | '\u{FFA0}' => Some("a Hangul filler"),
        _ => None,
    }
}

/// The first hiding character of `text` with its kind, if any.
pub fn find_hidden(text: &str) -> Option<(char, &'static str)> {
    text.chars().find_map(|c| hidden_kind(c).map(|k| (c, k)))
}

/// `text` safe to show: control characters (escape sequences' ESC included) become their visible
/// pictures (`␛[2J`), a carriage return not ending a line becomes `␍`, and every hiding character
/// is named (`[U+202E]`). Newlines and tabs stay. Borrowed when nothing needed changing.
pub fn neutralise(text: &str) -> Cow<'_, str> {
    let needs = |c: char| (c.is_control() && c != '\n' && c != '\t') || hidden_kind(c).is_some();
    if !text.chars().any(needs) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' | '\t' => out.push(c),
            '\r' if chars.peek() == Some(&'\n') => out.push(c),
            // C0 controls have pictures at U+2400 + their code; DEL at U+2421.
            '\u{0}'..='\u{1F}' => {
                out.push(char::from_u32(0x2400 + u32::from(c)).unwrap_or('\u{FFFD}'))
            }
            '\u{7F}' => out.push('\u{2421}'),
            c if c.is_control() || hidden_kind(c).is_some() => {
                let _ = write!(out, "[U+{:04X}]", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `text` cut to at most `max` bytes on a character boundary, the cut marked with `…`.
pub fn cut(text: &str, max: usize) -> String {
    const MARK: &str = "…";
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max.saturating_sub(MARK.len());
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MARK}", &text[..end])
}

/// Percent-encode everything but RFC 3986 unreserved characters.
pub fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_are_shown_not_run() {
        let shown = neutralise("ok\x1b[2J\x1b]0;pwned\x07done\r\nnext\rover");
        assert_eq!(shown, "ok␛[2J␛]0;pwned␇done\r\nnext␍over");
    }

    #[test]
    fn hiding_characters_are_named() {
        assert_eq!(neutralise("a\u{202E}txt.exe"), "a[U+202E]txt.exe");
        assert_eq!(neutralise("x\u{E0049}\u{9B}"), "x[U+E0049][U+009B]");
        assert_eq!(
            find_hidden("fine\u{200B}"),
            Some(('\u{200B}', "an invisible character"))
        );
    }

    #[test]
    fn ordinary_text_is_borrowed_untouched() {
        for text in ["plain\n\ttext", "emoji ❤️ 👩‍💻", "中文 العربية"] {
            assert!(
                matches!(neutralise(text), Cow::Borrowed(t) if t == text),
                "{text}"
            );
            assert_eq!(find_hidden(text), None, "{text}");
        }
    }
}
