//! Event types and subscription patterns.
//!
//! A pattern is an event type in which `*` matches any run of characters, dots included, and
//! nothing else is special: `user.*` matches `user.created`, `*` matches everything, and
//! `order.*.shipped` matches `order.123.shipped` but not `order.shipped`.

use crate::error::{Error, Result};

/// Longest event type or pattern accepted, in bytes (they are ASCII: characters too).
pub const MAX_TYPE_LEN: usize = 255;

/// A regular expression (ECMA-262, Python and Rust alike) of the event types
/// [`validate_event_type`] accepts in shape, for documents such as the admin API's OpenAPI
/// (with a `maxLength` of [`MAX_TYPE_LEN`]).
pub const EVENT_TYPE_REGEX: &str = "^[A-Za-z0-9_:/-]+(\\.[A-Za-z0-9_:/-]+)*$";

/// A regular expression of the patterns [`Pattern::new`] accepts (an event type in which `*`
/// may stand anywhere), with a `maxLength` of [`MAX_TYPE_LEN`].
pub const PATTERN_REGEX: &str = "^[A-Za-z0-9_:/*-]+(\\.[A-Za-z0-9_:/*-]+)*$";

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '/')
}

fn check_shape(s: &str, allow_star: bool) -> std::result::Result<(), &'static str> {
    if s.is_empty() {
        return Err("it is empty");
    }
    if s.len() > MAX_TYPE_LEN {
        return Err("it is longer than 255 bytes");
    }
    if let Some(c) = s
        .chars()
        .find(|&c| !(allowed(c) || (allow_star && c == '*')))
    {
        return Err(if c == '*' {
            "'*' is only allowed in subscription patterns"
        } else if c.is_whitespace() {
            "it contains whitespace"
        } else {
            "it contains a character other than letters, digits, '.', '_', '-', ':', '/'"
        });
    }
    if s.starts_with('.') || s.ends_with('.') || s.contains("..") {
        return Err("it has an empty segment (a leading, trailing or doubled '.')");
    }
    Ok(())
}

/// The prefix of the bus's own event types (`system.dead_letter`, `system.replay.started`, …).
/// Applications may subscribe to them but not publish them.
pub const SYSTEM_PREFIX: &str = "system.";

/// Whether `event_type` is one of the bus's own (`system.*`).
pub fn is_system_type(event_type: &str) -> bool {
    event_type.starts_with(SYSTEM_PREFIX)
}

/// Checks that `event_type` is a valid event type for an application to publish: well formed,
/// and not reserved for the bus (`system.*`).
pub fn validate_event_type(event_type: &str) -> Result<()> {
    validate_system_type(event_type)?;
    if is_system_type(event_type) {
        return Err(Error::InvalidEventType(
            event_type.into(),
            "types beginning with \"system.\" are reserved for the bus's own events",
        ));
    }
    Ok(())
}

/// Checks the shape of an event type, `system.*` included (the bus's own events).
pub(crate) fn validate_system_type(event_type: &str) -> Result<()> {
    check_shape(event_type, false).map_err(|why| Error::InvalidEventType(event_type.into(), why))
}

/// A compiled subscription pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    source: String,
    parts: Vec<String>,
}

impl Pattern {
    /// Parses and validates a pattern.
    pub fn new(pattern: &str) -> Result<Pattern> {
        check_shape(pattern, true).map_err(|why| Error::InvalidPattern(pattern.into(), why))?;
        Ok(Pattern {
            source: pattern.to_owned(),
            parts: pattern.split('*').map(str::to_owned).collect(),
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether `event_type` matches this pattern.
    pub fn matches(&self, event_type: &str) -> bool {
        glob_match(&self.parts, event_type)
    }
}

/// Matches `text` against a pattern already split at its `*`s: the first part must be a prefix,
/// the last a suffix, and the middle parts must occur in order between them.
fn glob_match(parts: &[String], text: &str) -> bool {
    let [first, rest @ ..] = parts else {
        return text.is_empty();
    };
    let Some(mut remaining) = text.strip_prefix(first.as_str()) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return remaining.is_empty();
    };
    for part in middle {
        match remaining.find(part.as_str()) {
            Some(pos) => remaining = &remaining[pos + part.len()..],
            None => return false,
        }
    }
    remaining.len() >= last.len() && remaining.ends_with(last.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn m(p: &str, t: &str) -> bool {
        Pattern::new(p).map(|p| p.matches(t)).unwrap_or(false)
    }

    #[test]
    fn the_specification_matching_table() {
        assert!(m("user.created", "user.created"));
        assert!(!m("user.created", "user.updated"));
        assert!(m("user.*", "user.created"));
        assert!(m("user.*", "user.updated"));
        assert!(!m("user.*", "order.created"));
        for t in ["a", "user.created", "order.123.shipped", "x.y.z"] {
            assert!(m("*", t), "* must match {t}");
        }
        assert!(m("order.*.shipped", "order.123.shipped"));
        assert!(!m("order.*.shipped", "order.shipped"));
    }

    #[test]
    fn star_spans_dots_and_anchors_both_ends() {
        assert!(m("user.*", "user.profile.updated"));
        assert!(!m("user.*", "user"));
        assert!(!m("user.created", "user.created.v2"));
        assert!(!m("user.created", "xuser.created"));
        assert!(m("*.created", "user.created"));
        assert!(!m("*.created", "user.created.v2"));
        assert!(m("a*b*c", "a.x.b.y.c"));
        assert!(!m("a*b*c", "a.x.c.y.b"));
        assert!(m("ab*ba", "aba.ba"));
        assert!(!m("ab*ba", "aba"));
        assert!(m("**", "x"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// The regular expressions the OpenAPI document carries accept exactly what the
        /// validators accept (with the length limit beside them).
        #[test]
        fn the_regexes_agree_with_the_validators(s in "[a-c.*: /é_-]{0,8}") {
            let fits = |re: &str| regex::Regex::new(re).map(|r| r.is_match(&s)).unwrap_or(false);
            prop_assert_eq!(fits(PATTERN_REGEX), Pattern::new(&s).is_ok(), "pattern {:?}", s);
            prop_assert_eq!(
                fits(EVENT_TYPE_REGEX),
                validate_system_type(&s).is_ok(),
                "type {:?}",
                s
            );
        }
    }

    #[test]
    fn bad_patterns_and_types_are_rejected_with_reasons() {
        for bad in [
            "",
            "user created",
            "user..created",
            ".user",
            "user.",
            "user.?",
            "é",
        ] {
            assert!(
                matches!(Pattern::new(bad), Err(Error::InvalidPattern(..))),
                "{bad:?}"
            );
            assert!(
                matches!(validate_event_type(bad), Err(Error::InvalidEventType(..))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            validate_event_type("user.*"),
            Err(Error::InvalidEventType(_, why)) if why.contains("patterns")
        ));
        assert!(validate_event_type(&"a".repeat(256)).is_err());
        assert!(validate_event_type(&"a".repeat(255)).is_ok());
        assert!(validate_event_type("billing:v2/order_paid-1.x").is_ok());
    }

    #[test]
    fn system_types_are_reserved_for_the_bus_but_can_be_subscribed_to() {
        for reserved in ["system.dead_letter", "system.replay.started", "system.x"] {
            assert!(
                matches!(
                    validate_event_type(reserved),
                    Err(Error::InvalidEventType(..))
                ),
                "{reserved}"
            );
            assert!(validate_system_type(reserved).is_ok());
            assert!(is_system_type(reserved));
        }
        for app in ["system", "systems.x", "my.system.x", "System.x"] {
            assert!(validate_event_type(app).is_ok(), "{app}");
            assert!(!is_system_type(app));
        }
        assert!(m("system.*", "system.dead_letter"));
        assert!(Pattern::new("system.*").is_ok());
    }

    proptest! {
        #[test]
        fn a_type_matches_itself_and_star(t in "[a-z]{1,5}(\\.[a-z0-9]{1,5}){0,3}") {
            prop_assert!(m(&t, &t));
            prop_assert!(m("*", &t));
        }

        #[test]
        fn prefix_star_matches_exactly_the_longer_extensions(
            prefix in "[a-z]{1,4}", rest in "[a-z]{1,3}(\\.[a-z]{1,3}){0,2}", other in "[a-z.]{1,8}"
        ) {
            let pat = format!("{prefix}.*");
            let t = format!("{prefix}.{rest}");
            prop_assert!(m(&pat, &t));
            prop_assert_eq!(m(&pat, &other), other.starts_with(&format!("{prefix}.")));
        }
    }
}
