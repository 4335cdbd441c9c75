//! What an operation does: a typed kind, stored by its name.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What a durable operation does.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum OperationKind {
    /// A replay of stored events (`replay`).
    #[serde(rename = "replay")]
    Replay,
    /// A bulk retry of dead letters (`dead_letters.retry`).
    #[serde(rename = "dead_letters.retry")]
    DeadLetterRetry,
    /// A bulk resolve of dead letters (`dead_letters.resolve`).
    #[serde(rename = "dead_letters.resolve")]
    DeadLetterResolve,
    /// A bulk abandon of dead letters (`dead_letters.abandon`).
    #[serde(rename = "dead_letters.abandon")]
    DeadLetterAbandon,
    /// A bulk purge of dead letters (`dead_letters.purge`).
    #[serde(rename = "dead_letters.purge")]
    DeadLetterPurge,
}

/// Every kind's name, as stored and as the CLI and the HTTP API take it.
pub const OPERATION_KINDS: [&str; 5] = [
    "replay",
    "dead_letters.retry",
    "dead_letters.resolve",
    "dead_letters.abandon",
    "dead_letters.purge",
];

impl OperationKind {
    /// Every kind, in the order of [`OPERATION_KINDS`].
    pub const ALL: [OperationKind; 5] = [
        OperationKind::Replay,
        OperationKind::DeadLetterRetry,
        OperationKind::DeadLetterResolve,
        OperationKind::DeadLetterAbandon,
        OperationKind::DeadLetterPurge,
    ];

    /// The name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            OperationKind::Replay => OPERATION_KINDS[0],
            OperationKind::DeadLetterRetry => OPERATION_KINDS[1],
            OperationKind::DeadLetterResolve => OPERATION_KINDS[2],
            OperationKind::DeadLetterAbandon => OPERATION_KINDS[3],
            OperationKind::DeadLetterPurge => OPERATION_KINDS[4],
        }
    }

    /// The dead-letter action a bulk kind applies (`retry`, `resolve`, `abandon`, `purge`), as
    /// the metrics label it; `None` for a replay.
    pub fn dead_letter_action(self) -> Option<&'static str> {
        self.as_str().strip_prefix("dead_letters.")
    }
}

impl fmt::Display for OperationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for OperationKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        OperationKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                Error::invalid(
                    "kind",
                    format!("{s:?} is not an operation kind"),
                    OPERATION_KINDS.join(", "),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_kind_round_trips_through_its_name() {
        for (kind, name) in OperationKind::ALL.into_iter().zip(OPERATION_KINDS) {
            assert_eq!(kind.as_str(), name);
            assert_eq!(name.parse::<OperationKind>().unwrap(), kind);
            assert_eq!(serde_json::to_value(kind).unwrap(), serde_json::json!(name));
        }
    }

    #[test]
    fn an_unknown_name_is_refused_with_the_known_ones() {
        let e = "dead_letters.frobnicate"
            .parse::<OperationKind>()
            .unwrap_err();
        assert!(e.to_string().contains("dead_letters.retry"), "{e}");
        assert!(serde_json::from_value::<OperationKind>(serde_json::json!("x")).is_err());
    }

    #[test]
    fn bulk_kinds_name_their_action_and_a_replay_has_none() {
        assert_eq!(
            OperationKind::DeadLetterPurge.dead_letter_action(),
            Some("purge")
        );
        assert_eq!(OperationKind::Replay.dead_letter_action(), None);
    }
}
