//! The partitions of a subscription with an event waiting in its line, as a process knows them.

use std::collections::HashSet;

/// The partitions of a subscription with an event waiting in its line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum Waiting {
    /// None.
    #[default]
    None,
    /// These (`""` under a limit without partitions).
    Parts(HashSet<String>),
    /// Too many to list: every partition counts as one.
    All,
}

impl Waiting {
    /// Whether an event of `part` waits.
    pub(super) fn covers(&self, part: &str) -> bool {
        match self {
            Waiting::None => false,
            Waiting::Parts(p) => p.contains(part),
            Waiting::All => true,
        }
    }

    /// An event of `part` waits too.
    pub(super) fn add(&mut self, part: &str) {
        match self {
            Waiting::None => *self = Waiting::Parts(HashSet::from([part.to_owned()])),
            Waiting::Parts(p) => {
                p.insert(part.to_owned());
            }
            Waiting::All => {}
        }
    }

    /// The partitions of both.
    pub(super) fn merge(self, other: &Waiting) -> Waiting {
        match (self, other) {
            (Waiting::All, _) | (_, Waiting::All) => Waiting::All,
            (w, Waiting::None) => w,
            (Waiting::None, w) => w.clone(),
            (Waiting::Parts(mut a), Waiting::Parts(b)) => {
                a.extend(b.iter().cloned());
                Waiting::Parts(a)
            }
        }
    }
}
