//! Whole numbers as JSON Schema's `integer` has them: `3`, and also `3.0` (a number whose
//! fraction is zero is an integer there). For `#[serde(deserialize_with = …)]` on the fields of
//! requests that an OpenAPI document describes, so that what the document calls valid is read
//! and nothing else: [`number`] and [`optional`] read JSON numbers (a string is refused, as the
//! schema refuses it); [`optional_text`] reads a query string's value, digits with an optional
//! sign and an optional zero fraction (`25`, `25.0`; not `1e3`).

use serde::de::{Deserializer, Error, Unexpected, Visitor};

/// Reads a whole JSON number into `T`, refusing a fraction, a value out of `T`'s range and
/// anything but a number.
pub fn number<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i128>,
{
    d.deserialize_any(Whole::<T, false>(std::marker::PhantomData))
}

/// [`number`] for an optional field (`null` or absent is `None`).
pub fn optional<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i128>,
{
    d.deserialize_option(Maybe::<T, false>(std::marker::PhantomData))
}

/// An optional whole number written as text (a query parameter).
pub fn optional_text<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i128>,
{
    d.deserialize_option(Maybe::<T, true>(std::marker::PhantomData))
}

struct Whole<T, const TEXT: bool>(std::marker::PhantomData<T>);

impl<T: TryFrom<i128>, const TEXT: bool> Whole<T, TEXT> {
    fn fit<E: Error>(&self, n: i128) -> Result<T, E> {
        T::try_from(n).map_err(|_| match i64::try_from(n) {
            Ok(small) => E::invalid_value(Unexpected::Signed(small), self),
            Err(_) => E::invalid_value(Unexpected::Other("a number out of range"), self),
        })
    }
}

impl<T: TryFrom<i128>, const TEXT: bool> Visitor<'_> for Whole<T, TEXT> {
    type Value = T;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (range_min::<T>(), range_max::<T>()) {
            (Some(min), Some(max)) => write!(f, "a whole number from {min} to {max}"),
            _ => f.write_str("a whole number"),
        }
    }

    fn visit_i64<E: Error>(self, n: i64) -> Result<T, E> {
        self.fit(i128::from(n))
    }

    fn visit_u64<E: Error>(self, n: u64) -> Result<T, E> {
        self.fit(i128::from(n))
    }

    fn visit_f64<E: Error>(self, n: f64) -> Result<T, E> {
        if !n.is_finite() || n.fract() != 0.0 {
            return Err(E::invalid_value(Unexpected::Float(n), &self));
        }
        if n.abs() >= 1.0e38 {
            return Err(E::invalid_value(Unexpected::Float(n), &self));
        }
        // Whole and within i128: the conversion is exact.
        #[allow(clippy::cast_possible_truncation)]
        self.fit(n as i128)
    }

    fn visit_str<E: Error>(self, s: &str) -> Result<T, E> {
        if !TEXT {
            return Err(E::invalid_type(Unexpected::Str(s), &self));
        }
        let digits = s.split_once('.').map_or(s, |(whole, fraction)| {
            if !fraction.is_empty() && fraction.bytes().all(|b| b == b'0') {
                whole
            } else {
                s
            }
        });
        let unsigned = digits.strip_prefix(['-', '+']).unwrap_or(digits);
        if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
            return Err(E::invalid_value(Unexpected::Str(s), &self));
        }
        match digits.parse::<i128>() {
            Ok(n) => self.fit(n),
            Err(_) => Err(E::invalid_value(Unexpected::Str(s), &self)),
        }
    }
}

/// The largest value `T` holds, found by halving (at most 128 steps), for the error message;
/// `None` when `T` holds no zero or every `i128`.
fn range_max<T: TryFrom<i128>>() -> Option<i128> {
    if T::try_from(0).is_err() || T::try_from(i128::MAX).is_ok() {
        return None;
    }
    let (mut fits, mut over) = (0_i128, i128::MAX);
    while over - fits > 1 {
        let mid = fits + (over - fits) / 2;
        if T::try_from(mid).is_ok() {
            fits = mid;
        } else {
            over = mid;
        }
    }
    Some(fits)
}

/// The smallest value `T` holds, the same way.
fn range_min<T: TryFrom<i128>>() -> Option<i128> {
    if T::try_from(0).is_err() || T::try_from(i128::MIN).is_ok() {
        return None;
    }
    let (mut fits, mut under) = (0_i128, i128::MIN);
    while fits.abs_diff(under) > 1 {
        let mid = fits / 2 + under / 2;
        if T::try_from(mid).is_ok() {
            fits = mid;
        } else {
            under = mid;
        }
    }
    Some(fits)
}

struct Maybe<T, const TEXT: bool>(std::marker::PhantomData<T>);

impl<'de, T: TryFrom<i128>, const TEXT: bool> Visitor<'de> for Maybe<T, TEXT> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a whole number or null")
    }

    fn visit_none<E: Error>(self) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_unit<E: Error>(self) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
        d.deserialize_any(Whole::<T, TEXT>(std::marker::PhantomData))
            .map(Some)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    #[derive(Debug, serde::Deserialize, PartialEq)]
    struct Body {
        #[serde(deserialize_with = "super::number")]
        n: u32,
        #[serde(default, deserialize_with = "super::optional")]
        m: Option<i64>,
    }

    fn read(json: &str) -> Result<Body, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn whole_numbers_with_or_without_a_zero_fraction() {
        assert_eq!(read(r#"{"n": 3}"#), Ok(Body { n: 3, m: None }));
        assert_eq!(
            read(r#"{"n": 3.0, "m": -2.0}"#),
            Ok(Body { n: 3, m: Some(-2) })
        );
        assert_eq!(
            read(r#"{"n": 1e3, "m": null}"#),
            Ok(Body { n: 1000, m: None })
        );
        for bad in [
            r#"{"n": 3.5}"#,
            r#"{"n": -1}"#,
            r#"{"n": 4294967296}"#,
            r#"{"n": true}"#,
            r#"{"n": "7"}"#,
            r#"{"n": "inf"}"#,
            r#"{"n": 1e300}"#,
        ] {
            assert!(read(bad).is_err(), "{bad}");
        }
        let e = read(r#"{"n": "fast"}"#).unwrap_err();
        assert!(
            e.contains("expected a whole number from 0 to 4294967295"),
            "{e}"
        );
    }

    #[derive(Debug, serde::Deserialize, PartialEq)]
    struct Query {
        #[serde(default, deserialize_with = "super::optional_text")]
        limit: Option<u32>,
    }

    #[test]
    fn query_text_is_digits_with_an_optional_zero_fraction() {
        let read = |q: &str| serde_urlencoded::from_str::<Query>(q).map(|q| q.limit);
        assert_eq!(read("limit=25").ok(), Some(Some(25)));
        assert_eq!(read("limit=25.0").ok(), Some(Some(25)));
        assert_eq!(read("").ok(), Some(None));
        for bad in [
            "limit=1e3",
            "limit=2.5",
            "limit=-1",
            "limit=abc",
            "limit=",
            "limit=.0",
        ] {
            assert!(read(bad).is_err(), "{bad}");
        }
    }
}
