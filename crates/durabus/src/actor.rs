//! Who acts on dead letters (and on operations): a name and a kind.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Who did something: recorded on every operator action, and used by metrics by kind.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Actor {
    /// A name: an OS user, an API token's name, `auto-retry`.
    pub name: String,
    /// Where the action came from.
    pub kind: ActorKind,
}

/// Where an action came from.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActorKind {
    /// The bus itself (the auto-retry job, retention).
    Auto,
    /// The command-line tool.
    Cli,
    /// The admin HTTP API.
    Api,
    /// An application calling the library.
    Library,
}

impl ActorKind {
    /// The name used in metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            ActorKind::Auto => "auto",
            ActorKind::Cli => "cli",
            ActorKind::Api => "api",
            ActorKind::Library => "library",
        }
    }

    /// The kind named `text` (as [`as_str`](Self::as_str) writes it), if it is one.
    pub fn parse(text: &str) -> Option<ActorKind> {
        [
            ActorKind::Auto,
            ActorKind::Cli,
            ActorKind::Api,
            ActorKind::Library,
        ]
        .into_iter()
        .find(|k| k.as_str() == text)
    }
}

/// The actor name of the auto-retry job, recorded as `resolved_by` when an auto retry
/// delivers a dead letter.
pub const AUTO_RETRY: &str = "auto-retry";

impl Actor {
    /// An actor of `kind` named `name`.
    pub fn new(name: impl Into<String>, kind: ActorKind) -> Actor {
        Actor {
            name: name.into(),
            kind,
        }
    }

    /// The auto-retry job.
    pub fn auto_retry() -> Actor {
        Actor::new(AUTO_RETRY, ActorKind::Auto)
    }

    /// Refuses an empty name.
    pub fn validate(&self) -> Result<()> {
        if self.name.trim().is_empty() {
            return Err(Error::invalid(
                "actor",
                "the actor's name is empty",
                "1 to 200 bytes",
            ));
        }
        if self.name.len() > 200 {
            return Err(Error::invalid(
                "actor",
                format!("the actor's name is {} bytes", self.name.len()),
                "1 to 200 bytes",
            ));
        }
        Ok(())
    }
}
