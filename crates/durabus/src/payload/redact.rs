//! Redaction: values at JSON paths replaced by `"[redacted]"` in everything an operator reads.
//!
//! A path starts at the root `$` and names object keys with `.key` (or `['key']` for keys with
//! other characters) and array elements with `[n]` or `[*]` (every element). A `*` key (`.*`)
//! is every value of an object. Examples: `$.card.number`, `$.user.email`, `$.items[*].sku`,
//! `$['odd key']`. A path that names nothing in a payload changes nothing.

use crate::error::{Error, Result};

/// What replaces a redacted value.
pub const REDACTED: &str = "[redacted]";

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    AnyKey,
    Index(usize),
    AnyIndex,
}

/// A parsed JSON path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonPath {
    text: String,
    steps: Vec<Step>,
}

/// Whitespace as `str::trim` sees it (Unicode `White_Space`): the inside of a regular
/// expression class.
macro_rules! ws_class {
    () => {
        "\\t\\n\\x0b\\x0c\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
    };
}

/// A bracket step: `[*]`, `[3]`, `['key']` or `["key"]`, whitespace allowed inside.
macro_rules! bracket {
    () => {
        concat!(
            "\\[[",
            ws_class!(),
            "]*(\\*|'[^\\]]*'|\"[^\\]]*\"|[0-9]{1,9})[",
            ws_class!(),
            "]*\\]"
        )
    };
}

/// A regular expression (ECMA-262, Python and Rust alike) of the paths [`JsonPath::parse`]
/// accepts: `$`, then steps `.key`, `.*`, `[*]`, `[3]`, `['key']` or `["key"]`, with
/// whitespace allowed around the whole (it is trimmed, so the last key cannot end in it) and
/// inside brackets.
pub const JSON_PATH_REGEX: &str = concat!(
    "^[",
    ws_class!(),
    "]*\\$(\\.[^.\\[]+|",
    bracket!(),
    ")*(\\.[^.\\[]*[^.\\[",
    ws_class!(),
    "]|",
    bracket!(),
    ")[",
    ws_class!(),
    "]*$"
);

impl JsonPath {
    /// Parses a path. Fails with [`Error::Invalid`] for one that does not start at `$`,
    /// is empty after it, or has a malformed step.
    pub fn parse(text: &str) -> Result<JsonPath> {
        let bad = |why: &str| {
            Error::invalid(
                "redact",
                format!("JSON path {text:?}: {why}"),
                "a path from $, such as $.card.number or $.items[*].sku",
            )
        };
        let rest = text
            .trim()
            .strip_prefix('$')
            .ok_or_else(|| bad("it must start with $"))?;
        let b = rest.as_bytes();
        let mut i = 0;
        let mut steps = Vec::new();
        while i < b.len() {
            match b[i] {
                b'.' => {
                    let start = i + 1;
                    let mut end = start;
                    while end < b.len() && b[end] != b'.' && b[end] != b'[' {
                        end += 1;
                    }
                    let key = &rest[start..end];
                    if key.is_empty() {
                        return Err(bad("a key after '.' is empty"));
                    }
                    steps.push(if key == "*" {
                        Step::AnyKey
                    } else {
                        Step::Key(key.to_owned())
                    });
                    i = end;
                }
                b'[' => {
                    let close = rest[i..]
                        .find(']')
                        .map(|n| i + n)
                        .ok_or_else(|| bad("a '[' is not closed"))?;
                    let inner = rest[i + 1..close].trim();
                    let step =
                        if inner == "*" {
                            Step::AnyIndex
                        } else if let Some(q) = inner
                            .strip_prefix('\'')
                            .and_then(|s| s.strip_suffix('\''))
                            .or_else(|| inner.strip_prefix('"').and_then(|s| s.strip_suffix('"')))
                        {
                            Step::Key(q.to_owned())
                        } else if (1..=9).contains(&inner.len())
                            && inner.bytes().all(|b| b.is_ascii_digit())
                        {
                            Step::Index(inner.parse().map_err(|_| {
                                bad("a bracket holds a number, '*' or a quoted key")
                            })?)
                        } else {
                            return Err(bad(
                                "a bracket holds an index of 1 to 9 digits, '*' or a quoted key",
                            ));
                        };
                    steps.push(step);
                    i = close + 1;
                }
                _ => return Err(bad("expected '.' or '[' after the root or a step")),
            }
        }
        if steps.is_empty() {
            return Err(bad("it names the whole payload; name the fields to hide"));
        }
        Ok(JsonPath {
            text: text.trim().to_owned(),
            steps,
        })
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Replaces the values this path names in `value`. Returns whether any was replaced.
    pub fn redact(&self, value: &mut serde_json::Value) -> bool {
        redact_at(value, &self.steps)
    }
}

fn redact_at(value: &mut serde_json::Value, steps: &[Step]) -> bool {
    use serde_json::Value;
    let Some((step, rest)) = steps.split_first() else {
        *value = Value::String(REDACTED.to_owned());
        return true;
    };
    match (step, value) {
        (Step::Key(k), Value::Object(map)) => map.get_mut(k).is_some_and(|v| redact_at(v, rest)),
        // Every value, not until the first hit.
        (Step::AnyKey, Value::Object(map)) => {
            let mut hit = false;
            for v in map.values_mut() {
                hit |= redact_at(v, rest);
            }
            hit
        }
        (Step::Index(n), Value::Array(items)) => {
            items.get_mut(*n).is_some_and(|v| redact_at(v, rest))
        }
        (Step::AnyIndex, Value::Array(items)) => {
            let mut hit = false;
            for v in items.iter_mut() {
                hit |= redact_at(v, rest);
            }
            hit
        }
        _ => false,
    }
}

/// Redacts every path in `paths` in the JSON text `payload`, returning the text to show. A
/// payload that is not JSON, or in which nothing matched, comes back as it was.
pub fn redact_text(payload: &str, paths: &[JsonPath]) -> String {
    if paths.is_empty() {
        return payload.to_owned();
    }
    let Ok(mut value) = serde_json::from_str::<serde_json::Value>(payload) else {
        return payload.to_owned();
    };
    let mut hit = false;
    for p in paths {
        hit |= p.redact(&mut value);
    }
    if hit {
        serde_json::to_string(&value).unwrap_or_else(|_| payload.to_owned())
    } else {
        payload.to_owned()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// The regular expression the OpenAPI document carries accepts exactly what the
        /// parser accepts.
        #[test]
        fn the_regex_agrees_with_the_parser(s in "[ $.\\[\\]*'\"a1\u{a0}\u{2028}]{0,8}") {
            let re = regex::Regex::new(JSON_PATH_REGEX).unwrap();
            prop_assert_eq!(re.is_match(&s), JsonPath::parse(&s).is_ok(), "{:?}", s);
        }

        #[test]
        fn the_stage_regex_agrees_with_the_check(s in "[a-c1*._/ -]{0,6}") {
            let re = regex::Regex::new(crate::payload::STAGES_ITEM_REGEX).unwrap();
            let ok = s == "*" || crate::payload::validate_stage(&s).is_ok();
            prop_assert_eq!(re.is_match(&s), ok, "{:?}", s);
        }
    }

    #[test]
    fn a_path_regex_sample_agrees_with_the_parser() {
        let re = regex::Regex::new(JSON_PATH_REGEX).unwrap();
        for (path, ok) in [
            ("$.card.number", true),
            ("  $.items[*].sku ", true),
            ("$['a.b'][ 12 ]", true),
            ("$[\"x\"]", true),
            ("$[1234567890]", false),
            ("$[+1]", false),
            ("$", false),
            ("$.", false),
            ("$['a]", false),
            ("$.a.\u{2028}", false),
            ("$. .a", true),
            ("$.a \u{2028}b ", true),
            ("card", false),
        ] {
            assert_eq!(re.is_match(path), ok, "regex {path:?}");
            assert_eq!(JsonPath::parse(path).is_ok(), ok, "parser {path:?}");
        }
    }

    fn paths(p: &[&str]) -> Vec<JsonPath> {
        p.iter().map(|s| JsonPath::parse(s).unwrap()).collect()
    }

    #[test]
    fn named_values_are_replaced_and_the_rest_kept() {
        let text = json!({
            "card": {"number": "4111 1111 1111 1111", "brand": "visa"},
            "user": {"email": "ann@example.com", "name": "Ann"},
            "items": [{"sku": "A1", "qty": 1}, {"sku": "B2", "qty": 2}],
            "odd key": 5
        })
        .to_string();
        let out: serde_json::Value = serde_json::from_str(&redact_text(
            &text,
            &paths(&[
                "$.card.number",
                "$.user.email",
                "$.items[*].sku",
                "$['odd key']",
            ]),
        ))
        .unwrap();
        assert_eq!(out["card"]["number"], REDACTED);
        assert_eq!(out["card"]["brand"], "visa");
        assert_eq!(out["user"]["email"], REDACTED);
        assert_eq!(out["user"]["name"], "Ann");
        assert_eq!(out["items"][0]["sku"], REDACTED);
        assert_eq!(out["items"][1]["sku"], REDACTED);
        assert_eq!(out["items"][1]["qty"], 2);
        assert_eq!(out["odd key"], REDACTED);
    }

    #[test]
    fn whole_subtrees_indices_and_wildcards() {
        let mut v = json!({"a": {"b": [1, {"c": 2}], "d": 3}});
        assert!(JsonPath::parse("$.a.b[1]").unwrap().redact(&mut v));
        assert_eq!(v, json!({"a": {"b": [1, REDACTED], "d": 3}}));
        let mut v = json!({"a": {"x": 1, "y": {"z": 2}}});
        assert!(JsonPath::parse("$.a.*").unwrap().redact(&mut v));
        assert_eq!(v, json!({"a": {"x": REDACTED, "y": REDACTED}}));
    }

    #[test]
    fn paths_that_name_nothing_change_nothing() {
        let text = r#"{"a":1,   "b":[1,2]}"#;
        assert_eq!(
            redact_text(text, &paths(&["$.nope", "$.b[5]", "$.a.b"])),
            text,
            "unchanged, byte for byte"
        );
        assert_eq!(redact_text("not json", &paths(&["$.a"])), "not json");
        assert_eq!(redact_text("[1,2]", &paths(&["$.a"])), "[1,2]");
    }

    #[test]
    fn bad_paths_are_refused() {
        for bad in ["", "a.b", "$", "$.", "$..a", "$[", "$[x]", "$.a[", "$a"] {
            assert!(JsonPath::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(JsonPath::parse(" $.a ").unwrap().as_str(), "$.a");
    }
}
