//! Every SQL statement of the SQLite store, built once per store for its table prefix, so that
//! the bus's tables can sit beside an application's own in one database file.

use super::rows::EVENT_COLUMNS;
use crate::error::{Error, Result};
use crate::event::EventStatus;

/// The table prefix used unless another is configured: tables `durabus_events`,
/// `durabus_subscriptions` and `durabus_meta`.
pub const DEFAULT_PREFIX: &str = "durabus_";

/// Checks a table prefix: 1 to 32 ASCII letters, digits and `_`, not starting with a digit or
/// with `sqlite_` (reserved by SQLite). It is written into SQL, so nothing else is allowed; it
/// may not be empty, since `events` and `meta` are common names of applications' own tables.
pub fn validate_prefix(prefix: &str) -> Result<()> {
    let ok = !prefix.is_empty()
        && !prefix.to_ascii_lowercase().starts_with("sqlite_")
        && prefix.len() <= 32
        && prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !prefix.starts_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidConfig(format!(
            "table prefix {prefix:?} must be 1 to 32 ASCII letters, digits or '_', not starting with a digit or sqlite_"
        )))
    }
}

macro_rules! statements {
    ($($(#[$doc:meta])* $name:ident = $sql:expr;)*) => {
        /// The store's statements with the table prefix filled in (`{p}` in the templates).
        #[derive(Debug, Clone)]
        #[doc(hidden)]
        pub struct Sql {
            /// The table prefix.
            pub prefix: String,
            $($(#[$doc])* pub $name: String,)*
            /// The statements of dead letters, operations and jobs.
            pub ops: super::sql_ops::OpsSql,
        }

        impl Sql {
            /// The statements for tables named with `prefix`. Fails with
            /// [`Error::InvalidConfig`] for a prefix that [`validate_prefix`] rejects.
            pub fn new(prefix: &str) -> Result<Sql> {
                validate_prefix(prefix)?;
                Ok(Self::build(prefix))
            }

            /// The statements for the default prefix.
            pub fn default_tables() -> Sql {
                Self::build(DEFAULT_PREFIX)
            }

            fn build(prefix: &str) -> Sql {
                Sql {
                    prefix: prefix.to_owned(),
                    $($name: fill($sql, prefix),)*
                    ops: super::sql_ops::OpsSql::build(prefix),
                }
            }
        }
    };
}

pub(super) fn fill(template: &str, prefix: &str) -> String {
    template
        .replace("{p}", prefix)
        .replace("{cols}", EVENT_COLUMNS)
}

/// The due-events filter. `INDEXED BY` pins the partial index on due events: on a table where
/// most rows are pending the planner would otherwise scan past claimed rows. `LIMIT ?2 + 0`
/// rather than `LIMIT ?2`: SQLite recompiles a statement on every run when the planner has
/// looked at a bound LIMIT, which cost more than the claim itself.
macro_rules! due_filter {
    () => {
        "FROM {p}events INDEXED BY {p}events_due
         WHERE status = 'pending' AND next_attempt_at <= ?1 ORDER BY next_attempt_at LIMIT ?2 + 0"
    };
}

statements! {
    /// The meta table (schema version).
    meta = "{p}meta";
    /// The due events a claim takes (`?1` now, `?2` how many): ids only, for query plans.
    due = concat!("SELECT id ", due_filter!());
    /// The claim's SELECT: every column of the due events.
    claim_select = concat!("SELECT {cols} ", due_filter!());
    /// Marks one claimed event `processing`.
    claim_update = "UPDATE {p}events SET status = 'processing', updated_at = ?2 WHERE id = ?1";
    /// Inserts one event unless its id exists (idempotent publish).
    insert = "INSERT INTO {p}events (id, type, payload, status, metadata, created_at, updated_at, next_attempt_at,
             published_snapshot)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7, ?8) ON CONFLICT(id) DO NOTHING";
    /// Outcome: done, for an event that was never a dead letter (the common case: a plain
    /// update, no RETURNING, which costs SQLite an ephemeral table per row).
    record_done = "UPDATE {p}events SET status = 'done', delivered = ?2, updated_at = ?3, next_attempt_at = NULL
         WHERE id = ?1 AND status = 'processing' AND dlq_count = 0";
    /// Outcome: done, for a revived dead letter (whose record the delivery resolves).
    record_done_revived = "UPDATE {p}events SET status = 'done', delivered = ?2, updated_at = ?3, next_attempt_at = NULL
         WHERE id = ?1 AND status = 'processing' AND dlq_count > 0";
    /// Outcome: retry later.
    record_retry = "UPDATE {p}events SET status = 'pending', retry_count = ?2, last_error = ?3, delivered = ?4,
             updated_at = ?5, next_attempt_at = ?6
         WHERE id = ?1 AND status = 'processing'";
    /// Outcome: dead letter. Returns the event's dead-letter count before this death (above
    /// 0: its record gets a new round).
    record_dead = "UPDATE {p}events SET status = 'dlq', retry_count = ?2, last_error = ?3, delivered = ?4,
             updated_at = ?5, dlq_at = ?5, next_attempt_at = NULL, dlq_count = dlq_count + 1
         WHERE id = ?1 AND status = 'processing' RETURNING dlq_count - 1";
    /// Gives one claimed event back.
    release = "UPDATE {p}events SET status = 'pending', updated_at = ?2, next_attempt_at = ?2
         WHERE id = ?1 AND status = 'processing'";
    /// Crash recovery of every `processing` event (`?1` now), the interrupted attempt counted
    /// as `store::recovery` decides (`?2` added to the retry count, `?3` the note appended).
    recover = "UPDATE {p}events SET status = 'pending', retry_count = retry_count + ?2,
             last_error = json_insert(coalesce(last_error, '[]'), '$[#]', ?3),
             updated_at = ?1, next_attempt_at = ?1
         WHERE status = 'processing'";
    /// Frees a subscription name for another id.
    subscription_free_name = "DELETE FROM {p}subscriptions WHERE name = ?1 AND id <> ?2";
    /// Stores a subscription.
    subscription_save = "INSERT INTO {p}subscriptions (id, name, event_type, created_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(id) DO UPDATE SET name = excluded.name, event_type = excluded.event_type";
    /// Deletes a subscription.
    subscription_delete = "DELETE FROM {p}subscriptions WHERE id = ?1";
    /// Every subscription.
    subscriptions = "SELECT id, name, event_type, created_at FROM {p}subscriptions ORDER BY created_at, id";
    /// One chunk of the history purge: done events completed at or before `?1`, at most `?2`
    /// (each with whether it holds a shared `published` snapshot).
    history_purge = "SELECT rowid, id, published_snapshot IS NOT NULL FROM {p}events
         WHERE status = 'done' AND updated_at <= ?1 LIMIT ?2 + 0";
    /// Deletes one event row of the history purge.
    history_delete = "DELETE FROM {p}events WHERE rowid = ?1";
    /// The earliest due time.
    next_due = "SELECT next_attempt_at FROM {p}events INDEXED BY {p}events_due
         WHERE status = 'pending' ORDER BY next_attempt_at LIMIT 1";
    /// One event by id.
    get_event = "SELECT {cols} FROM {p}events WHERE id = ?1";
    /// Counts by type and status.
    counts = "SELECT type, status, count(*) FROM {p}events GROUP BY type, status ORDER BY type, status";
    /// Counts by status and retry count.
    retry_counts = "SELECT status, retry_count, count(*) FROM {p}events GROUP BY status, retry_count
         ORDER BY status, retry_count";
}

/// Which filters a listing has; each present filter adds one parameter, in this order: type,
/// created from, created before; then limit and offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[doc(hidden)]
pub struct ListFilter {
    /// Only this status (written into the SQL: it is one of four words).
    pub status: Option<EventStatus>,
    /// A type parameter.
    pub by_type: bool,
    /// A `created_at >=` parameter.
    pub from: bool,
    /// A `created_at <` parameter.
    pub until: bool,
}

impl Sql {
    /// The listing query for the filters given, newest first. Dead letters come from their
    /// partial index ordered by `created_at`; other listings walk the table backwards in
    /// insertion order (newest first) without a sort. Limit and offset are `? + 0`: bound values
    /// that the planner looks at make SQLite recompile the statement on every run.
    pub fn list(&self, f: ListFilter) -> String {
        let mut terms = Vec::new();
        if let Some(s) = f.status {
            terms.push(format!("status = '{}'", s.as_str()));
        }
        if f.by_type {
            terms.push("type = ?".to_owned());
        }
        if f.from {
            terms.push("created_at >= ?".to_owned());
        }
        if f.until {
            terms.push("created_at < ?".to_owned());
        }
        let filter = if terms.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", terms.join(" AND "))
        };
        let order = if f.status == Some(EventStatus::Dlq) {
            "created_at DESC, id DESC"
        } else {
            "rowid DESC"
        };
        format!(
            "SELECT {EVENT_COLUMNS} FROM {}events {filter} ORDER BY {order} LIMIT ? + 0 OFFSET ? + 0",
            self.prefix
        )
    }

    /// The schema migrations, in order, for this prefix: version and SQL.
    pub(crate) fn migrations(&self) -> Vec<(i64, String)> {
        crate::store::migrations::SQLITE
            .iter()
            .map(|m| (m.version, fill(m.sql, &self.prefix)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_checked() {
        for ok in ["durabus_", "app_bus_", "X1_", "bus"] {
            assert!(validate_prefix(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "1x",
            "a-b",
            "a b",
            "a;drop",
            "é",
            "sqlite_x",
            "SQLite_",
            &"x".repeat(33),
        ] {
            assert!(
                matches!(validate_prefix(bad), Err(Error::InvalidConfig(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn every_statement_names_prefixed_tables() -> Result<()> {
        let sql = Sql::new("app_")?;
        assert!(sql.insert.contains("INTO app_events"));
        assert!(sql.claim_select.contains("INDEXED BY app_events_due"));
        assert!(!sql.claim_select.contains("{"));
        assert!(sql.list(ListFilter::default()).contains("FROM app_events"));
        assert!(sql.migrations().iter().all(|(_, m)| !m.contains("{p}")));
        Ok(())
    }
}
