//! The ledger: what the never-killed parent learns from its children's standard output, and
//! the delivery log the children's handlers append to.
//!
//! A child prints a line before each publish (`I <kind> <id>,<id>…`) and one after it returned
//! success (`A <id>,<id>…`); an acknowledgement the parent has read is one the child's caller
//! was given. Handlers append `<life> <id> ok|fail` to one file opened with `O_APPEND`, one
//! `write` per line, so a line is in the file once the handler has returned and no kill can
//! tear it.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use anyhow::{Context, bail};
use durabus::EventId;

use crate::check::{Delivery, Kind};

/// A line from a child that is not about a publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// The bus is open (its store migrated), recovery not yet run.
    Opened,
    /// The bus has started: recovery done, delivering.
    Started {
        /// Events recovered from `processing`.
        recovered: u64,
    },
    /// A publish failed; nothing was acknowledged.
    Refused(String),
    /// A publisher with a limit has published everything.
    Published,
    /// The drain finished: nothing pending or processing.
    Drained,
    /// Anything else the child said.
    Other(String),
}

/// Every publish announced and acknowledged, across every child and life.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    /// Announced events and their kinds.
    pub intended: HashMap<EventId, Kind>,
    /// Acknowledged events.
    pub acked: HashSet<EventId>,
    /// Publishes that returned an error.
    pub refused: u64,
}

fn ids(list: &str) -> anyhow::Result<Vec<EventId>> {
    list.split(',')
        .map(|s| s.parse().with_context(|| format!("bad event id {s:?}")))
        .collect()
}

impl Ledger {
    /// Takes one line of a child's output.
    pub fn take(&mut self, line: &str) -> anyhow::Result<Option<Signal>> {
        let (tag, rest) = line.split_once(' ').unwrap_or((line, ""));
        Ok(match tag {
            "I" => {
                let (kind, list) = rest.split_once(' ').context("intent without ids")?;
                let kind = Kind::of_type(kind).with_context(|| format!("bad kind {kind:?}"))?;
                for id in ids(list)? {
                    self.intended.insert(id, kind);
                }
                None
            }
            "A" => {
                for id in ids(rest)? {
                    if !self.intended.contains_key(&id) {
                        bail!("acknowledgement of {id}, which was never announced");
                    }
                    self.acked.insert(id);
                }
                None
            }
            "O" => Some(Signal::Opened),
            "S" => Some(Signal::Started {
                recovered: rest.parse().unwrap_or(0),
            }),
            "X" => {
                self.refused += 1;
                Some(Signal::Refused(rest.to_owned()))
            }
            "D" => Some(Signal::Drained),
            "P" => Some(Signal::Published),
            _ => Some(Signal::Other(line.to_owned())),
        })
    }
}

/// The handlers' side: appends one line per delivery.
#[derive(Debug)]
pub struct DeliveryLog {
    file: File,
    life: u32,
}

impl DeliveryLog {
    /// Opens (creating) the log at `path` for appending, for a child in `life`.
    pub fn open(path: &Path, life: u32) -> anyhow::Result<DeliveryLog> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening the delivery log {}", path.display()))?;
        Ok(DeliveryLog { file, life })
    }

    /// Records one handler run, in one `write`.
    pub fn record(&self, id: EventId, ok: bool) {
        let line = format!("{} {id} {}\n", self.life, if ok { "ok" } else { "fail" });
        // A failed write fails the test later (a missing delivery), it cannot be hidden.
        let _ = (&self.file).write_all(line.as_bytes());
    }
}

/// Reads every delivery in the log at `path` (none if it does not exist).
pub fn read_deliveries(path: &Path) -> anyhow::Result<Vec<Delivery>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    text.lines()
        .enumerate()
        .map(|(n, line)| {
            let mut parts = line.split(' ');
            let (Some(life), Some(id), Some(ok), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                bail!("delivery log line {}: torn or garbled: {line:?}", n + 1);
            };
            Ok(Delivery {
                life: life.parse()?,
                id: id.parse()?,
                ok: match ok {
                    "ok" => true,
                    "fail" => false,
                    _ => bail!("delivery log line {}: bad outcome {ok:?}", n + 1),
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn reads_announcements_acknowledgements_and_signals() {
        let mut l = Ledger::default();
        let (a, b) = (EventId::new(), EventId::new());
        assert_eq!(l.take(&format!("I torture.ok {a},{b}")).unwrap(), None);
        assert_eq!(l.take(&format!("A {a}")).unwrap(), None);
        assert_eq!(
            l.take("S 3").unwrap(),
            Some(Signal::Started { recovered: 3 })
        );
        assert_eq!(
            l.take("X locked").unwrap(),
            Some(Signal::Refused("locked".into()))
        );
        assert_eq!(l.intended.len(), 2);
        assert_eq!(l.acked, HashSet::from([a]));
        assert_eq!(l.refused, 1);
    }

    #[test]
    fn refuses_an_acknowledgement_never_announced_and_bad_ids() {
        let mut l = Ledger::default();
        assert!(l.take(&format!("A {}", EventId::new())).is_err());
        assert!(l.take("I torture.ok nope").is_err());
        assert!(l.take("I torture.what 0").is_err());
    }

    #[test]
    fn the_delivery_log_round_trips_and_refuses_torn_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("deliveries");
        let id = EventId::new();
        let log = DeliveryLog::open(&path, 4).unwrap();
        log.record(id, true);
        DeliveryLog::open(&path, 5).unwrap().record(id, false);
        let read = read_deliveries(&path).unwrap();
        assert_eq!(
            read,
            vec![
                Delivery {
                    id,
                    ok: true,
                    life: 4
                },
                Delivery {
                    id,
                    ok: false,
                    life: 5
                }
            ]
        );
        std::fs::write(&path, format!("4 {id}")).unwrap();
        assert!(
            read_deliveries(&path)
                .unwrap_err()
                .to_string()
                .contains("torn")
        );
        assert!(
            read_deliveries(&dir.path().join("none"))
                .unwrap()
                .is_empty()
        );
    }
}
