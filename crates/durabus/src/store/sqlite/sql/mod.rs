//! Every SQL statement of the SQLite store, in one registry ([`Sql`]) built once per store for
//! its table prefix, so that the bus's tables can sit beside an application's own in one
//! database file. The templates live by capability (`events.rs`, `dead_letters.rs`,
//! `operations.rs`, `payloads.rs`, `cancels.rs`, `keys.rs`); the statements built from a
//! filter at run time in `filter.rs`.

mod cancels;
mod dead_letters;
mod events;
mod filter;
mod keys;
mod operations;
mod payloads;

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
        Err(Error::invalid(
            "prefix",
            format!("{prefix:?} is not a table prefix durabus uses"),
            "1 to 32 ASCII letters, digits or '_', not starting with a digit or sqlite_",
        ))
    }
}

macro_rules! statements {
    ($($name:ident = $template:path;)*) => {
        /// The store's statements with the table prefix filled in. Each field is the template
        /// of the same name, in capitals, in this module's files.
        #[derive(Debug, Clone)]
        #[doc(hidden)]
        pub struct Sql {
            /// The table prefix.
            pub prefix: String,
            $(#[doc = concat!("The statement built from `", stringify!($template), "`.")]
            pub $name: String,)*
        }

        impl Sql {
            /// The statements for tables named with `prefix`. Fails with
            /// [`Error::Invalid`] for a prefix that [`validate_prefix`] rejects.
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
                    $($name: fill($template, prefix),)*
                }
            }
        }
    };
}

/// `template` with the table prefix and the column lists filled in.
fn fill(template: &str, prefix: &str) -> String {
    template
        .replace("{p}", prefix)
        .replace("{cols}", EVENT_COLUMNS)
        .replace("{ecols}", &super::rows::event_columns_of("e"))
        .replace("{dl}", dead_letters::DL_COLUMNS)
        .replace("{op}", operations::OP_COLUMNS)
}

statements! {
    meta = events::META;
    stats_get = events::STATS_GET;
    stats_put = events::STATS_PUT;
    due = events::DUE;
    claim_select = events::CLAIM_SELECT;
    claim_high = events::CLAIM_HIGH;
    claim_low = events::CLAIM_LOW;
    due_scheduled = events::DUE_SCHEDULED;
    promote = events::PROMOTE;
    waiting_put = events::WAITING_PUT;
    waiting_delete = events::WAITING_DELETE;
    waiting_pending = events::WAITING_PENDING;
    waiting_recovered = events::WAITING_RECOVERED;
    claim_update = events::CLAIM_UPDATE;
    insert = events::INSERT;
    dedup_get = events::DEDUP_GET;
    dedup_put = events::DEDUP_PUT;
    dedup_purge = events::DEDUP_PURGE;
    record_done = events::RECORD_DONE;
    record_done_head = events::RECORD_DONE_HEAD;
    record_done_other_read = events::RECORD_DONE_OTHER_READ;
    record_done_other = events::RECORD_DONE_OTHER;
    record_retry = events::RECORD_RETRY;
    record_snooze = events::RECORD_SNOOZE;
    snooze_count_up = events::SNOOZE_COUNT_UP;
    snooze_count = events::SNOOZE_COUNT;
    record_dead = events::RECORD_DEAD;
    release = events::RELEASE;
    recover = events::RECOVER;
    subscription_free_name = events::SUBSCRIPTION_FREE_NAME;
    subscription_save = events::SUBSCRIPTION_SAVE;
    subscription_delete = events::SUBSCRIPTION_DELETE;
    subscriptions = events::SUBSCRIPTIONS;
    history_purge = events::HISTORY_PURGE;
    history_delete = events::HISTORY_DELETE;
    next_due = events::NEXT_DUE;
    get_event = events::GET_EVENT;
    counts = events::COUNTS;
    retry_counts = events::RETRY_COUNTS;
    key_tail = keys::KEY_TAIL;
    key_tail_set = keys::KEY_TAIL_SET;
    key_tail_back = keys::KEY_TAIL_BACK;
    key_tail_drop = keys::KEY_TAIL_DROP;
    key_join = keys::KEY_JOIN;
    key_place = keys::KEY_PLACE;
    key_drop = keys::KEY_DROP;
    key_next = keys::KEY_NEXT;
    key_link = keys::KEY_LINK;
    key_wake = keys::KEY_WAKE;
    key_hand = keys::KEY_HAND;
    key_give_back = keys::KEY_GIVE_BACK;
    key_cancelled = keys::KEY_CANCELLED;
    key_dead = keys::KEY_DEAD;
    key_cancelled_all = keys::KEY_CANCELLED_ALL;
    key_waiting = keys::KEY_WAITING;
    key_hold = keys::KEY_HOLD;
    key_unhold = keys::KEY_UNHOLD;
    key_in_queue = keys::KEY_IN_QUEUE;
    key_dead_letter = keys::KEY_DEAD_LETTER;
    key_of = keys::KEY_OF;
    key_undue = keys::KEY_UNDUE;
    cn_state = cancels::CN_STATE;
    cn_event = cancels::CN_EVENT;
    cn_request = cancels::CN_REQUEST;
    cn_subscription = cancels::CN_SUBSCRIPTION;
    cn_insert = cancels::CN_INSERT;
    cn_list = cancels::CN_LIST;
    dl_get = dead_letters::DL_GET;
    dl_state = dead_letters::DL_STATE;
    dl_insert = dead_letters::DL_INSERT;
    dl_died_again = dead_letters::DL_DIED_AGAIN;
    dl_set_state = dead_letters::DL_SET_STATE;
    dl_delete = dead_letters::DL_DELETE;
    dl_delete_event = dead_letters::DL_DELETE_EVENT;
    dl_requeue = dead_letters::DL_REQUEUE;
    dl_withdraw = dead_letters::DL_WITHDRAW;
    dl_auto_due = dead_letters::DL_AUTO_DUE;
    dl_closed_before = dead_letters::DL_CLOSED_BEFORE;
    dl_dead_before = dead_letters::DL_DEAD_BEFORE;
    dl_max_seq = dead_letters::DL_MAX_SEQ;
    group_adjust = dead_letters::GROUP_ADJUST;
    group_prune = dead_letters::GROUP_PRUNE;
    group_exists = dead_letters::GROUP_EXISTS;
    group_buckets = dead_letters::GROUP_BUCKETS;
    group_upsert = dead_letters::GROUP_UPSERT;
    groups = dead_letters::GROUPS;
    op_insert = operations::OP_INSERT;
    op_get = operations::OP_GET;
    op_list = operations::OP_LIST;
    op_claim = operations::OP_CLAIM;
    op_open = operations::OP_OPEN;
    op_advance = operations::OP_ADVANCE;
    op_cancel = operations::OP_CANCEL;
    op_release = operations::OP_RELEASE;
    op_fail = operations::OP_FAIL;
    job_ensure = operations::JOB_ENSURE;
    job_begin_tick = operations::JOB_BEGIN_TICK;
    job_skip_tick = operations::JOB_SKIP_TICK;
    job_begin_now = operations::JOB_BEGIN_NOW;
    job_end = operations::JOB_END;
    jobs = operations::JOBS;
    pl_put = payloads::PL_PUT;
    pl_list = payloads::PL_LIST;
    pl_soft_delete = payloads::PL_SOFT_DELETE;
    pl_shared_get = payloads::PL_SHARED_GET;
    pl_shared_clear = payloads::PL_SHARED_CLEAR;
    pl_shared_scan = payloads::PL_SHARED_SCAN;
    pl_shared_deleted = payloads::PL_SHARED_DELETED;
    pl_scan_first = payloads::PL_SCAN_FIRST;
    pl_scan_after = payloads::PL_SCAN_AFTER;
    pl_delete = payloads::PL_DELETE;
    pl_purge_deleted = payloads::PL_PURGE_DELETED;
    pl_config_list = payloads::PL_CONFIG_LIST;
    pl_config_set = payloads::PL_CONFIG_SET;
    pl_config_delete = payloads::PL_CONFIG_DELETE;
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
    /// An ordering key parameter.
    pub by_key: bool,
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
        if f.by_key {
            terms.push("ordering_key = ?".to_owned());
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
                matches!(validate_prefix(bad), Err(Error::Invalid(_))),
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
