//! Failure groups: the fingerprint of a dead letter's last error.
//!
//! Two dead letters are the same failure when the same subscription failed with the same
//! message once its variable parts are taken out. [`normalise`] replaces, left to right:
//!
//! | what | becomes | example |
//! |---|---|---|
//! | text in single, double or back quotes | `<str>` | `user 'ann@x.io' not found` → `user <str> not found` |
//! | a UUID | `<uuid>` | `order 0190a5b2-7c1e-7d3a-9f1e-2b3c4d5e6f70` → `order <uuid>` |
//! | an RFC 3339 / ISO 8601 timestamp | `<time>` | `at 2026-11-23T04:25:51.552Z` → `at <time>` |
//! | `0x` followed by hex digits, or a run of 8+ hex digits with a digit in it | `<hex>` | `token a3f9c2d1e0` → `token <hex>` |
//! | a number (digits, with a fraction) | `<n>` | `card for order #99 refused` → `card for order #<n> refused` |
//!
//! and collapses runs of whitespace. The fingerprint is a 64-bit FNV-1a hash of the
//! subscription key and the normalised message, written as 16 hex digits: stable across
//! processes, versions and platforms.

/// The fingerprint of a failure of subscription `subscription` with message `error`.
pub fn fingerprint(subscription: &str, error: &str) -> String {
    let normalised = normalise(error);
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in subscription
        .bytes()
        .chain(std::iter::once(0u8))
        .chain(normalised.bytes())
    {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

fn is_hex(b: u8) -> bool {
    b.is_ascii_hexdigit()
}

/// Length of a UUID (8-4-4-4-12 hex digits) at the start of `s`, if there is one.
fn uuid_at(s: &[u8]) -> Option<usize> {
    const GROUPS: [usize; 5] = [8, 4, 4, 4, 12];
    let mut i = 0;
    for (g, len) in GROUPS.iter().enumerate() {
        if g > 0 {
            if s.get(i) != Some(&b'-') {
                return None;
            }
            i += 1;
        }
        if s.len() < i + len || !s[i..i + len].iter().all(|b| is_hex(*b)) {
            return None;
        }
        i += len;
    }
    (!s.get(i).is_some_and(|b| b.is_ascii_alphanumeric())).then_some(i)
}

fn digits(s: &[u8], from: usize, n: usize) -> bool {
    s.len() >= from + n && s[from..from + n].iter().all(u8::is_ascii_digit)
}

/// Length of a timestamp (`YYYY-MM-DD`, then optionally `T` or a space, `HH:MM`, `:SS`, a
/// fraction and a zone) at the start of `s`.
fn time_at(s: &[u8]) -> Option<usize> {
    if !(digits(s, 0, 4)
        && s.get(4) == Some(&b'-')
        && digits(s, 5, 2)
        && s.get(7) == Some(&b'-')
        && digits(s, 8, 2))
    {
        return None;
    }
    let mut i = 10;
    if matches!(s.get(i), Some(b'T' | b't' | b' '))
        && digits(s, i + 1, 2)
        && s.get(i + 3) == Some(&b':')
        && digits(s, i + 4, 2)
    {
        i += 6;
        if s.get(i) == Some(&b':') && digits(s, i + 1, 2) {
            i += 3;
            if matches!(s.get(i), Some(b'.' | b',')) && s.get(i + 1).is_some_and(u8::is_ascii_digit)
            {
                i += 1;
                while s.get(i).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                }
            }
        }
        match s.get(i) {
            Some(b'Z' | b'z') => i += 1,
            Some(b'+' | b'-') if digits(s, i + 1, 2) => {
                i += 3;
                if s.get(i) == Some(&b':') && digits(s, i + 1, 2) {
                    i += 3;
                } else if digits(s, i, 2) {
                    i += 2;
                }
            }
            _ => {}
        }
    }
    Some(i)
}

/// Length of a hex value at the start of `s`: `0x` + hex digits, or 8+ hex digits with at
/// least one digit among them, not followed by a letter or digit.
fn hex_at(s: &[u8]) -> Option<usize> {
    if s.len() > 2 && s[0] == b'0' && matches!(s[1], b'x' | b'X') && is_hex(s[2]) {
        let mut i = 2;
        while s.get(i).is_some_and(|b| is_hex(*b)) {
            i += 1;
        }
        return Some(i);
    }
    let run = s.iter().take_while(|b| is_hex(**b)).count();
    let has_digit = s[..run].iter().any(u8::is_ascii_digit);
    let ends = !s
        .get(run)
        .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_');
    (run >= 8 && has_digit && ends).then_some(run)
}

/// Length of a number (digits, optionally a fraction) at the start of `s`.
fn number_at(s: &[u8]) -> Option<usize> {
    let mut i = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if i == 0 {
        return None;
    }
    if s.get(i) == Some(&b'.') && s.get(i + 1).is_some_and(u8::is_ascii_digit) {
        i += 1;
        while s.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
    }
    Some(i)
}

/// Length of a quoted value at the start of `s` (the closing quote included), if it closes.
fn quoted_at(s: &[u8]) -> Option<usize> {
    let q = *s.first()?;
    if !matches!(q, b'\'' | b'"' | b'`') {
        return None;
    }
    s[1..].iter().position(|b| *b == q).map(|end| end + 2)
}

/// The error message with its variable parts replaced (see the module docs).
pub fn normalise(error: &str) -> String {
    let s = error.as_bytes();
    let mut out = String::with_capacity(error.len());
    let mut i = 0;
    // Whether the previous byte belongs to a word, so that a match must start a new token
    // (the digits in `v2` or `utf8` are left alone only when glued to letters before them).
    let mut in_word = false;
    while i < s.len() {
        let rest = &s[i..];
        let token = if in_word {
            None
        } else {
            quoted_at(rest)
                .map(|n| (n, "<str>"))
                .or_else(|| uuid_at(rest).map(|n| (n, "<uuid>")))
                .or_else(|| time_at(rest).map(|n| (n, "<time>")))
                .or_else(|| hex_at(rest).map(|n| (n, "<hex>")))
                .or_else(|| number_at(rest).map(|n| (n, "<n>")))
        };
        if let Some((n, replacement)) = token {
            out.push_str(replacement);
            i += n;
            in_word = false;
            continue;
        }
        let c = error[i..].chars().next().unwrap_or(' ');
        if c.is_whitespace() {
            if !out.ends_with(' ') && !out.is_empty() {
                out.push(' ');
            }
            in_word = false;
        } else {
            out.push(c);
            in_word = c.is_alphanumeric() || c == '_';
        }
        i += c.len_utf8();
    }
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `fingerprint("s", "x 1")` as this version computes it.
    const FIXED: &str = "0e7c2d45ed514f42";

    #[test]
    fn the_documented_examples() {
        assert_eq!(
            normalise("user 'ann@x.io' not found"),
            "user <str> not found"
        );
        assert_eq!(
            normalise("order 0190a5b2-7c1e-7d3a-9f1e-2b3c4d5e6f70 missing"),
            "order <uuid> missing"
        );
        assert_eq!(
            normalise("at 2026-11-23T04:25:51.552Z failed"),
            "at <time> failed"
        );
        assert_eq!(normalise("token a3f9c2d1e0 expired"), "token <hex> expired");
        assert_eq!(normalise("addr 0xDEADbeef"), "addr <hex>");
        assert_eq!(
            normalise("card for order #99 refused by the issuer"),
            "card for order #<n> refused by the issuer"
        );
        assert_eq!(normalise("took 12.5 ms"), "took <n> ms");
        assert_eq!(normalise("  a \t\n b  "), "a b");
        assert_eq!(normalise("said \"x y\" and `z`"), "said <str> and <str>");
    }

    #[test]
    fn words_with_digits_and_unclosed_quotes_stay() {
        assert_eq!(normalise("utf8 v2 http2"), "utf8 v2 http2");
        assert_eq!(normalise("it's over"), "it's over");
        assert_eq!(normalise("deadbeef"), "deadbeef", "hex words need a digit");
        assert_eq!(normalise("2026-11-23 backup"), "<time> backup");
        assert_eq!(normalise("héllo 5 wörld"), "héllo <n> wörld");
        assert_eq!(normalise(""), "");
    }

    #[test]
    fn fingerprints_are_stable_and_short() {
        let a = fingerprint("payments", "card for order #99 refused");
        assert_eq!(a.len(), 16);
        assert_eq!(a, fingerprint("payments", "card for order #12345 refused"));
        assert_ne!(a, fingerprint("email", "card for order #99 refused"));
        assert_ne!(a, fingerprint("payments", "card for order #99 accepted"));
        // Fingerprints are stored: they must not change between versions.
        assert_eq!(fingerprint("s", "x 1"), FIXED);
    }

    proptest! {
        #[test]
        fn the_same_failure_with_other_ids_is_one_group(
            n1 in 0u64..u64::MAX, n2 in 0u64..u64::MAX,
            u1 in proptest::array::uniform16(any::<u8>()), u2 in proptest::array::uniform16(any::<u8>()),
            q1 in "[a-z@. ]{0,12}", q2 in "[a-z@. ]{0,12}",
            ms1 in 0i64..4_000_000_000_000, ms2 in 0i64..4_000_000_000_000,
        ) {
            let msg = |n: u64, u: [u8; 16], q: &str, ms: i64| format!(
                "order {} of user '{q}' failed at {} after {n} tries",
                uuid::Uuid::from_bytes(u),
                crate::clock::Timestamp(ms),
            );
            prop_assert_eq!(
                fingerprint("billing", &msg(n1, u1, &q1, ms1)),
                fingerprint("billing", &msg(n2, u2, &q2, ms2))
            );
        }

        #[test]
        fn different_subscriptions_are_different_groups(sub1 in "[a-z]{1,8}", sub2 in "[a-z]{1,8}", msg in ".{0,40}") {
            prop_assume!(sub1 != sub2);
            prop_assert_ne!(fingerprint(&sub1, &msg), fingerprint(&sub2, &msg));
        }

        #[test]
        fn normalising_is_idempotent_and_never_panics(msg in "\\PC{0,80}") {
            let once = normalise(&msg);
            prop_assert_eq!(normalise(&once), once.clone());
        }
    }
}
