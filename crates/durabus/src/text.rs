//! Free text an operator writes (a note on a dead letter, the reason for a deletion): not
//! blank, and at most so many characters (Unicode scalar values, as JSON Schema's `maxLength`
//! counts them). The admin API's OpenAPI document states the same rules ([`NOT_BLANK`] as a
//! pattern, the limit as `maxLength`), so a client that validates against it and the server
//! agree on every input.

use crate::error::{Error, Result};

/// Unicode `White_Space` (what `str::trim` removes) as the inside of a character class.
macro_rules! white_space {
    () => {
        "\\t\\n\\x0b\\x0c\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
    };
}

/// A regular expression, read alike by ECMA-262, Python and Rust, that text matches when it
/// holds a character other than whitespace (Unicode `White_Space`: what `str::trim` removes).
pub const NOT_BLANK: &str = concat!("[^", white_space!(), "]");

/// A regular expression text matches when it holds no NUL (U+0000): no stored text can hold
/// one (PostgreSQL's `text` refuses it), so operators' text and filters refuse it.
pub const NO_NUL: &str = "^[^\\x00]*$";

/// [`NOT_BLANK`] and [`NO_NUL`] at once: what a required note or reason matches.
pub const REQUIRED_TEXT: &str = concat!("^[^\\x00]*[^\\x00", white_space!(), "][^\\x00]*$");

/// Refuses `text` (the value of `field`) when it holds a NUL character.
pub(crate) fn check_no_nul(field: &str, text: &str, accepted: &str) -> Result<()> {
    if text.contains('\0') {
        return Err(Error::invalid(
            field,
            "holds a NUL character (U+0000)",
            accepted,
        ));
    }
    Ok(())
}

/// Whether `text` is empty or whitespace only.
pub fn is_blank(text: &str) -> bool {
    text.trim().is_empty()
}

/// Refuses `text` (the value of `field`) over `max` characters, or blank when `required`
/// (`why` says what the text is for).
pub(crate) fn check(field: &str, text: &str, max: usize, required: Option<&str>) -> Result<()> {
    let accepted = || {
        if required.is_some() {
            format!("1 to {max} characters, not all whitespace")
        } else {
            format!("at most {max} characters")
        }
    };
    if let Some(why) = required
        && is_blank(text)
    {
        return Err(Error::invalid(field, why, accepted()));
    }
    let n = text.chars().count();
    if n > max {
        return Err(Error::invalid(field, format!("{n} characters"), accepted()));
    }
    check_no_nul(field, text, &accepted())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn blank_is_what_trim_removes_and_the_pattern_says_so() {
        let pattern = regex::Regex::new(NOT_BLANK).unwrap_or_else(|e| panic!("{e}"));
        let white: Vec<char> = (0..=0x10FFFFu32)
            .filter_map(char::from_u32)
            .filter(|c| c.is_whitespace())
            .collect();
        assert_eq!(white.len(), 25, "Unicode White_Space");
        for c in white {
            let s = c.to_string();
            assert!(is_blank(&s) && !pattern.is_match(&s), "{:?}", c);
        }
        for s in ["a", " a ", "\u{feff}", "\u{200b}", "\u{1c}"] {
            assert!(!is_blank(s) && pattern.is_match(s), "{s:?}");
        }
    }

    #[test]
    fn limits_count_characters_and_name_the_field() {
        assert!(check("note", &"é".repeat(2000), 2000, Some("why")).is_ok());
        let e = check("note", &"é".repeat(2001), 2000, None).unwrap_err();
        let v = e.invalid_value().unwrap_or_else(|| panic!("{e}"));
        assert_eq!(
            (v.field.as_str(), v.problem.as_str(), v.accepted.as_str()),
            ("note", "2001 characters", "at most 2000 characters")
        );
        let e = check("reason", " \t", 255, Some("a reason is needed")).unwrap_err();
        assert!(
            e.to_string().starts_with("reason: a reason is needed"),
            "{e}"
        );
        assert!(check("note", "", 2000, None).is_ok());
        let e = check("note", "a\0b", 2000, None).unwrap_err();
        assert_eq!(
            e.invalid_value().map(|v| v.problem),
            Some("holds a NUL character (U+0000)".to_owned())
        );
    }

    #[test]
    fn the_patterns_say_what_check_accepts() {
        let required = regex::Regex::new(REQUIRED_TEXT).unwrap_or_else(|e| panic!("{e}"));
        let optional = regex::Regex::new(NO_NUL).unwrap_or_else(|e| panic!("{e}"));
        for s in [
            "",
            " ",
            "a",
            " a ",
            "a\0",
            "\0",
            "\0 ",
            "é\u{3000}",
            "\u{1c}",
            "x\ny",
        ] {
            let required_ok = check("note", s, 100, Some("why")).is_ok();
            let optional_ok = check("note", s, 100, None).is_ok();
            assert_eq!(required.is_match(s), required_ok, "{s:?}");
            assert_eq!(optional.is_match(s), optional_ok, "{s:?}");
        }
    }
}
