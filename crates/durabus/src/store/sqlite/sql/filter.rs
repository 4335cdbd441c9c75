//! The dead-letter statements built from a filter at run time: listings, counts, and the
//! chunks of a bulk action's frozen selection.

use super::Sql;
use super::dead_letters::{DL_COLUMNS, DL_SUMMARY_COLUMNS};
use crate::dlq::{DeadLetterFilter, Keyset};

/// A `WHERE` clause for `filter` (no leading keyword; `1` when it selects everything) and its
/// parameters, in order.
pub fn dl_filter(filter: &DeadLetterFilter) -> (String, Vec<rusqlite::types::Value>) {
    let mut terms: Vec<String> = Vec::new();
    let mut args: Vec<rusqlite::types::Value> = Vec::new();
    if !filter.status.is_empty() {
        let list: Vec<String> = filter
            .status
            .iter()
            .map(|s| format!("'{}'", s.as_str()))
            .collect();
        terms.push(format!("status IN ({})", list.join(", ")));
    }
    if let Some(t) = &filter.event_type {
        // Types and patterns are letters, digits and `._-:/` (and `*`): GLOB's only other
        // special characters (`?`, `[`) cannot occur.
        if t.contains('*') {
            terms.push("event_type GLOB ?".into());
        } else {
            terms.push("event_type = ?".into());
        }
        args.push(t.clone().into());
    }
    if let Some(s) = &filter.subscription {
        terms.push("subscription = ?".into());
        args.push(s.clone().into());
    }
    if let Some(g) = &filter.group {
        terms.push("fingerprint = ?".into());
        args.push(g.clone().into());
    }
    if let Some(from) = filter.created_from {
        terms.push("created_at >= ?".into());
        args.push(from.as_millis().into());
    }
    if let Some(before) = filter.created_before {
        terms.push("created_at < ?".into());
        args.push(before.as_millis().into());
    }
    if terms.is_empty() {
        ("1".into(), args)
    } else {
        (terms.join(" AND "), args)
    }
}

impl Sql {
    /// A keyset page of records matching `filter`, newest first.
    pub fn dl_list(
        &self,
        filter: &DeadLetterFilter,
        page: &Keyset,
    ) -> (String, Vec<rusqlite::types::Value>) {
        self.dl_page(filter, page, DL_COLUMNS)
    }

    /// The same page as [`dl_list`](Self::dl_list), with the summary columns.
    pub fn dl_list_summaries(
        &self,
        filter: &DeadLetterFilter,
        page: &Keyset,
    ) -> (String, Vec<rusqlite::types::Value>) {
        self.dl_page(filter, page, DL_SUMMARY_COLUMNS)
    }

    fn dl_page(
        &self,
        filter: &DeadLetterFilter,
        page: &Keyset,
        columns: &str,
    ) -> (String, Vec<rusqlite::types::Value>) {
        let (mut cond, mut args) = dl_filter(filter);
        if let Some(before) = page.before {
            cond.push_str(" AND seq < ?");
            args.push(before.into());
        }
        args.push(i64::from(page.limit).into());
        (
            format!(
                "SELECT {columns} FROM {}dead_letters WHERE {cond} ORDER BY seq DESC LIMIT ? + 0",
                self.prefix
            ),
            args,
        )
    }

    /// How many records match `filter` with `seq <= bound`.
    pub fn dl_count(
        &self,
        filter: &DeadLetterFilter,
        bound: Option<i64>,
    ) -> (String, Vec<rusqlite::types::Value>) {
        let (mut cond, mut args) = dl_filter(filter);
        if let Some(b) = bound {
            cond.push_str(" AND seq <= ?");
            args.push(b.into());
        }
        (
            format!(
                "SELECT count(*) FROM {}dead_letters WHERE {cond}",
                self.prefix
            ),
            args,
        )
    }

    /// The next chunk of a frozen selection: records after `cursor` up to `bound`, oldest
    /// first.
    pub fn dl_chunk(
        &self,
        filter: &DeadLetterFilter,
        cursor: i64,
        bound: i64,
        limit: usize,
    ) -> (String, Vec<rusqlite::types::Value>) {
        let (cond, mut args) = dl_filter(filter);
        args.push(cursor.into());
        args.push(bound.into());
        args.push(i64::try_from(limit).unwrap_or(i64::MAX).into());
        (
            format!(
                "SELECT event_id, seq FROM {}dead_letters WHERE {cond} AND seq > ? AND seq <= ?
                 ORDER BY seq LIMIT ? + 0",
                self.prefix
            ),
            args,
        )
    }
}
