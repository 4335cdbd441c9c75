//! Content flags, set automatically on every snapshot.
//!
//! **`contains_media`** is set when any string in the payload is
//! - a data URI of a media type: `data:image/…`, `data:audio/…`, `data:video/…` or
//!   `data:application/pdf…`; or
//! - the value of a MIME-type field (`mime`, `mimetype`, `mime_type`, `mimeType`,
//!   `content_type`, `contentType`, `media_type`, `mediaType`) naming an image, audio or video
//!   type, or `application/pdf`.
//!
//! **`contains_base64`** is set when any string in the payload is a `;base64,` data URI, or
//! holds a run of at least 64 characters of the base64 alphabet (`A–Z a–z 0–9 + /`, or the URL
//! alphabet `- _`) that
//! - uses upper-case letters, lower-case letters and digits (so hex digests, long words and
//!   numbers are not taken for base64), and
//! - decodes cleanly: a length that is a whole number of 4-character groups (with `=` padding
//!   only at the end), or, without padding, a length that is not 1 more than a multiple of 4.

use serde_json::Value;

/// The flags of one payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ContentFlags {
    /// It carries media (see the module docs).
    pub contains_media: bool,
    /// It carries base64-encoded data.
    pub contains_base64: bool,
}

/// Shortest run of base64 alphabet taken for encoded data.
pub const MIN_BASE64_RUN: usize = 64;

const MIME_KEYS: [&str; 8] = [
    "mime",
    "mimetype",
    "mime_type",
    "mimeType",
    "content_type",
    "contentType",
    "media_type",
    "mediaType",
];

fn media_mime(s: &str) -> bool {
    let s = s.trim().to_ascii_lowercase();
    s.starts_with("image/")
        || s.starts_with("audio/")
        || s.starts_with("video/")
        || s.starts_with("application/pdf")
}

fn media_data_uri(s: &str) -> bool {
    s.get(..5).is_some_and(|p| p.eq_ignore_ascii_case("data:")) && media_mime(&s[5..])
}

fn b64_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'-' | b'_')
}

/// Whether `run` (alphabet characters, then at most two `=`) decodes cleanly.
fn decodes(body: &[u8], padding: usize) -> bool {
    if padding > 2 {
        return false;
    }
    let standard = body
        .iter()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/'));
    let url = body
        .iter()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_'));
    if !(standard || url) {
        return false;
    }
    if padding > 0 {
        (body.len() + padding).is_multiple_of(4)
    } else {
        body.len() % 4 != 1
    }
}

fn mixed(body: &[u8]) -> bool {
    body.iter().any(u8::is_ascii_uppercase)
        && body.iter().any(u8::is_ascii_lowercase)
        && body.iter().any(u8::is_ascii_digit)
}

/// Whether `s` holds base64 data (see the module docs).
pub fn looks_base64(s: &str) -> bool {
    if s.get(..5).is_some_and(|p| p.eq_ignore_ascii_case("data:")) && s.contains(";base64,") {
        return true;
    }
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if !b64_char(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && b64_char(b[i]) {
            i += 1;
        }
        let body = &b[start..i];
        let mut padding = 0;
        while i < b.len() && b[i] == b'=' {
            padding += 1;
            i += 1;
        }
        if body.len() >= MIN_BASE64_RUN && mixed(body) && decodes(body, padding) {
            return true;
        }
    }
    false
}

fn walk(value: &Value, key: Option<&str>, flags: &mut ContentFlags) {
    match value {
        Value::String(s) => {
            if media_data_uri(s) || (key.is_some_and(|k| MIME_KEYS.contains(&k)) && media_mime(s)) {
                flags.contains_media = true;
            }
            if !flags.contains_base64 && looks_base64(s) {
                flags.contains_base64 = true;
            }
        }
        Value::Array(items) => {
            for v in items {
                walk(v, None, flags);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                walk(v, Some(k), flags);
            }
        }
        _ => {}
    }
}

/// The flags of the JSON text `payload` (a text that is not JSON has none).
pub fn detect(payload: &str) -> ContentFlags {
    let mut flags = ContentFlags::default();
    if !may_flag(payload.as_bytes()) {
        return flags;
    }
    if let Ok(value) = serde_json::from_str::<Value>(payload) {
        walk(&value, None, &mut flags);
    }
    flags
}

/// Whether `text` can set a flag at all: every rule needs, somewhere in the text, a media
/// MIME type (`image/`, `audio/`, `video/`, `application/pdf`, any case), `;base64,`, or a run
/// of [`MIN_BASE64_RUN`] base64 characters; a JSON escape (`\`) could hide one, so a text with
/// a backslash is always parsed. Most payloads have none of these and are not parsed at all (a
/// byte scan instead of building a JSON tree per snapshot).
fn may_flag(text: &[u8]) -> bool {
    // One pass: a counter for the base64 run; each media type ends its prefix with `/` and
    // `;base64,` starts with `;`, so only those two bytes look around them.
    let mut run = 0usize;
    for (i, &c) in text.iter().enumerate() {
        match c {
            b'\\' => return true,
            // `/` is also in the base64 alphabet: counted in the run below.
            b'/' if media_prefix_ends_at(text, i) => return true,
            b';' if text[i..].starts_with(b";base64,") => return true,
            _ => {}
        }
        if b64_char(c) {
            run += 1;
            if run >= MIN_BASE64_RUN {
                return true;
            }
        } else {
            run = 0;
        }
    }
    false
}

/// Whether the `/` at `slash` ends `image/`, `audio/`, `video/` or starts the `/pdf` of
/// `application/pdf` (any case).
fn media_prefix_ends_at(text: &[u8], slash: usize) -> bool {
    let before = |word: &[u8]| {
        slash >= word.len() && text[slash - word.len()..slash].eq_ignore_ascii_case(word)
    };
    before(b"image")
        || before(b"audio")
        || before(b"video")
        || (before(b"application")
            && text
                .get(slash + 1..slash + 4)
                .is_some_and(|w| w.eq_ignore_ascii_case(b"pdf")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy;
    use serde_json::json;

    const B64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

    fn flags(v: serde_json::Value) -> ContentFlags {
        detect(&v.to_string())
    }

    #[test]
    fn the_prefilter_never_hides_a_flag() {
        // Each flagged sample passes the byte scan; escaped JSON is always parsed.
        for text in [
            format!("{{\"a\": \"data:IMAGE/png;base64,{B64}\"}}"),
            "{\"mime\": \"Video/mp4\"}".to_owned(),
            "{\"mime\": \"image\\/png\"}".to_owned(),
            format!("{{\"blob\": \"{B64}\"}}"),
            "{\"d\": \"data:text/plain;base64,aGk=\"}".to_owned(),
        ] {
            assert!(may_flag(text.as_bytes()), "{text}");
        }
        assert!(detect("{\"mime\": \"image\\/png\"}").contains_media);
        assert!(detect("{\"d\": \"data:text/plain;base64,aGk=\"}").contains_base64);
        let plain =
            r#"{"order_id": 7, "customer": "customer-0001-with-a-reasonably-long-identifier"}"#;
        assert!(!may_flag(plain.as_bytes()));
        assert_eq!(detect(plain), ContentFlags::default());
    }

    /// The scan as first written (a pass per rule): the one-pass scan must agree with it.
    fn may_flag_by_rule(text: &[u8]) -> bool {
        const MEDIA: [&[u8]; 4] = [b"image/", b"audio/", b"video/", b"application/pdf"];
        let mut run = 0usize;
        let mut long_run = false;
        for &c in text {
            run = if b64_char(c) { run + 1 } else { 0 };
            long_run |= run >= MIN_BASE64_RUN;
        }
        text.contains(&b'\\')
            || long_run
            || text.windows(8).any(|w| w == b";base64,")
            || MEDIA
                .iter()
                .any(|m| text.windows(m.len()).any(|w| w.eq_ignore_ascii_case(m)))
    }

    #[test]
    fn the_one_pass_scan_agrees_with_the_rules_at_every_edge() {
        let edges = [
            "image/",
            "IMAGE/png",
            "xaudio/",
            "Video/",
            "application/pdf",
            "APPLICATION/PDF",
            "application/pd",
            "application/",
            "/pdf",
            "image",
            "/image/",
            ";base64,",
            ";base64",
            "base64,",
            "\\",
            "data:;base64,",
        ];
        let run = |n: usize| "aB3".repeat(n / 3 + 1)[..n].to_owned();
        let mut texts: Vec<String> = Vec::new();
        for e in edges {
            for (pre, post) in [("", ""), ("{\"k\": \"", "\"}"), ("xx ", " yy")] {
                texts.push(format!("{pre}{e}{post}"));
            }
        }
        for n in [62, 63, 64, 65] {
            texts.push(run(n));
            texts.push(format!("\"{}\" {}", run(n), run(10)));
            texts.push(format!("{}/{}", run(n / 2), run(n / 2)));
        }
        for t in &texts {
            assert_eq!(
                may_flag(t.as_bytes()),
                may_flag_by_rule(t.as_bytes()),
                "{t:?}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn the_one_pass_scan_agrees_with_the_rules(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    "[a-zA-Z0-9+/=_ ;:,\\\\-]{0,80}",
                    proptest::sample::select(vec![
                        "image/", "Audio/", "video/", "application/pdf", "application/",
                        "pdf", ";base64,", "\\", "/",
                    ]).prop_map(str::to_owned),
                ],
                0..8,
            )
        ) {
            let text = parts.concat();
            proptest::prop_assert_eq!(may_flag(text.as_bytes()), may_flag_by_rule(text.as_bytes()));
        }
    }

    #[test]
    fn media_is_found_in_data_uris_and_mime_fields() {
        for yes in [
            json!({"avatar": format!("data:image/png;base64,{B64}")}),
            json!({"file": {"mime_type": "audio/ogg", "url": "https://x"}}),
            json!({"attachments": [{"contentType": "application/pdf"}]}),
            json!({"clip": "DATA:video/mp4,abc"}),
        ] {
            assert!(flags(yes.clone()).contains_media, "{yes}");
        }
        for no in [
            json!({"note": "image/png is a format"}),
            json!({"mime_type": "text/plain"}),
            json!({"url": "https://example.com/cat.png"}),
            json!({"data": "data:text/plain,hello"}),
        ] {
            assert!(!flags(no.clone()).contains_media, "{no}");
        }
    }

    #[test]
    fn base64_is_found_and_lookalikes_are_not() {
        for yes in [
            json!({"blob": B64}),
            json!({"blob": format!("prefix {B64} suffix")}),
            json!({"avatar": "data:image/png;base64,AAAA"}),
            json!({"nested": [{"x": B64.trim_end_matches('=')}]}),
            json!({"url_safe": "aGVsbG8gd29ybGQ_dGhpcyBpcy1iYXNlNjR1cmwgZW5jb2RlZCBkYXRhIDEyMzQ1Njc4OTA"}),
        ] {
            assert!(flags(yes.clone()).contains_base64, "{yes}");
        }
        let hex = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        let words = "a".repeat(100);
        for no in [
            json!({"sha256": hex}),
            json!({"text": words}),
            json!({"n": "1234567890".repeat(10)}),
            json!({"short": "QUJDRGVmZ2gxMjM0"}),
            json!({"bad_length": format!("{}A", &B64[..68])}),
            json!({"too_much_padding": format!("{}===", &B64[..96])}),
        ] {
            assert!(!flags(no.clone()).contains_base64, "{no}");
        }
    }

    #[test]
    fn plain_payloads_have_no_flags() {
        assert_eq!(
            flags(json!({"order": 1, "items": ["a"]})),
            ContentFlags::default()
        );
        assert_eq!(detect("not json"), ContentFlags::default());
    }
}
