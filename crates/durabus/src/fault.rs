//! Fail points for the reliability suite (`durabus-torture`): named places in the write and
//! delivery paths where a test build can abort the whole process, to prove that a crash at
//! exactly that moment loses nothing acknowledged.
//!
//! Compiled only with the `fault-injection` feature, which no application should enable.
//! Without it the `fail_point!` calls compile to nothing. With it, nothing changes until a
//! point is armed by the environment variable [`ENV`] of the process, read once:
//! `DURABUS_FAILPOINTS="insert.before_commit=0.05,dlq.move"` aborts (`SIGABRT`) at each hit of
//! a named point with the given probability (1 when none is given). Unset or empty, every point
//! is a no-op.
//!
//! One point changes behaviour instead of aborting: [`ACK_BEFORE_COMMIT`], the suite's
//! self-test of its checker. Armed, an `enqueue` answers before its event is committed (and
//! starts the write 5 ms late), so a kill right after the answer loses the event: the checker
//! must report it. Enabling the feature never does this by itself.

use std::sync::OnceLock;

/// The environment variable that arms fail points.
pub const ENV: &str = "DURABUS_FAILPOINTS";

/// The point that makes an `enqueue` (and a batch) answer before its events are committed:
/// a deliberately broken acknowledgement, for the reliability suite's self-test.
pub const ACK_BEFORE_COMMIT: &str = "publish.ack_before_commit";

/// Every fail point, with where it sits.
pub const POINTS: &[(&str, &str)] = &[
    (
        "insert.before_commit",
        "an insert has run inside its transaction, which is not yet committed",
    ),
    (
        "publish.before_reply",
        "a publish is committed and the caller not yet answered",
    ),
    (
        "handler.before_record",
        "handlers have run and their outcome is not yet recorded",
    ),
    (
        "retry.schedule",
        "a retry is being scheduled, inside the transaction that records it",
    ),
    (
        "dlq.move",
        "an event is moving to the dead-letter queue: its row is updated, its record not yet written",
    ),
    (
        "bulk.chunk",
        "halfway through a chunk of a bulk dead-letter operation, inside its transaction",
    ),
];

static ARMED: OnceLock<Vec<(String, f64)>> = OnceLock::new();

/// Parses `name[=probability]` items separated by commas. Unknown names are refused, so a typo
/// cannot leave a test running without its faults.
pub fn parse(spec: &str) -> std::result::Result<Vec<(String, f64)>, String> {
    let mut armed = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, p) = match item.split_once('=') {
            Some((name, p)) => (
                name.trim(),
                p.trim()
                    .parse::<f64>()
                    .map_err(|e| format!("fail point {item}: {e}"))?,
            ),
            None => (item, 1.0),
        };
        if name != ACK_BEFORE_COMMIT && !POINTS.iter().any(|(n, _)| *n == name) {
            return Err(format!("unknown fail point {name:?}"));
        }
        if !(0.0..=1.0).contains(&p) {
            return Err(format!(
                "fail point {name}: probability {p} is not in 0..=1"
            ));
        }
        armed.push((name.to_owned(), p));
    }
    Ok(armed)
}

/// Whether point `name` is armed and its dice say it fires now.
pub fn fires(name: &str) -> bool {
    let armed = ARMED.get_or_init(|| match std::env::var(ENV) {
        Ok(spec) => parse(&spec).unwrap_or_else(|e| {
            eprintln!("durabus: {ENV}: {e}");
            std::process::abort()
        }),
        Err(_) => Vec::new(),
    });
    armed
        .iter()
        .find(|(n, _)| n == name)
        .is_some_and(|(_, p)| fastrand::f64() < *p)
}

/// A fail point was reached: aborts the process if it is armed and its dice say so.
pub fn hit(name: &'static str) {
    if fires(name) {
        eprintln!("durabus: fail point {name} fired: aborting");
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_names_and_probabilities() {
        assert_eq!(
            parse(" dlq.move , insert.before_commit=0.25").unwrap(),
            vec![
                ("dlq.move".to_owned(), 1.0),
                ("insert.before_commit".to_owned(), 0.25)
            ]
        );
        assert!(parse("").unwrap().is_empty());
        assert_eq!(
            parse(ACK_BEFORE_COMMIT).unwrap(),
            vec![(ACK_BEFORE_COMMIT.to_owned(), 1.0)]
        );
    }

    #[test]
    fn refuses_unknown_points_and_bad_probabilities() {
        assert!(
            parse("dlq.mvoe")
                .unwrap_err()
                .contains("unknown fail point")
        );
        assert!(parse("dlq.move=2").unwrap_err().contains("not in 0..=1"));
        assert!(parse("dlq.move=x").is_err());
    }
}
