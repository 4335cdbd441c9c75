//! Walking stored events for a replay on SQLite: in insertion order (by rowid, the table's own
//! B-tree: no index to keep up on the hot path), bounded by the last rowid at submit.

use rusqlite::Connection;
use rusqlite::types::Value;

use super::rows::{EVENT_COLUMN_COUNT, EVENT_COLUMNS, event_from_row};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::replay::ReplaySelection;
use crate::store::Position;

/// The `WHERE` terms and their arguments for `selection` up to `bound` (events aliased `e`).
fn terms(selection: &ReplaySelection, bound: i64) -> Result<(Vec<&'static str>, Vec<Value>)> {
    let mut terms = vec!["e.rowid <= ?"];
    let mut args: Vec<Value> = vec![bound.into()];
    if let Some(from) = selection.from {
        terms.push("e.created_at >= ?");
        args.push(from.as_millis().into());
    }
    if let Some(to) = selection.to {
        terms.push("e.created_at < ?");
        args.push(to.as_millis().into());
    }
    let json = |what: &str, v: Vec<String>| {
        serde_json::to_string(&v).map_err(|e| Error::unserialisable(what, &e))
    };
    if !selection.ids.is_empty() {
        terms.push("e.id IN (SELECT value FROM json_each(?))");
        let ids = selection.ids.iter().map(ToString::to_string).collect();
        args.push(json("a replay's ids", ids)?.into());
    }
    if !selection.statuses.is_empty() {
        terms.push("e.status IN (SELECT value FROM json_each(?))");
        let st = selection
            .statuses
            .iter()
            .map(|s| s.as_str().to_owned())
            .collect();
        args.push(json("a replay's statuses", st)?.into());
    }
    if !selection.types.is_empty() {
        // GLOB's `*` is the pattern's `*`; the other GLOB specials (`?`, `[`) cannot occur in a
        // valid pattern.
        terms.push("EXISTS (SELECT 1 FROM json_each(?) j WHERE e.type GLOB j.value)");
        args.push(json("a replay's types", selection.types.clone())?.into());
    }
    if !selection.includes_system() {
        terms.push("e.type NOT GLOB 'system.*'");
    }
    Ok((terms, args))
}

/// The highest rowid: the bound of a walk frozen now.
pub(super) fn bound(conn: &Connection, prefix: &str) -> rusqlite::Result<i64> {
    conn.prepare_cached(&format!(
        "SELECT coalesce(max(rowid), 0) FROM {prefix}events"
    ))?
    .query_row([], |r| r.get(0))
}

/// The statement counting events per type, and its arguments.
pub(super) fn count_query(
    prefix: &str,
    selection: &ReplaySelection,
    bound: i64,
) -> Result<(String, Vec<Value>)> {
    let (terms, args) = terms(selection, bound)?;
    let text = format!(
        "SELECT e.type, count(*) FROM {prefix}events e WHERE {} GROUP BY e.type",
        terms.join(" AND ")
    );
    Ok((text, args))
}

/// Runs a statement made by [`count_query`].
pub(super) fn count(
    conn: &Connection,
    text: &str,
    args: Vec<Value>,
) -> rusqlite::Result<Vec<(String, u64)>> {
    conn.prepare_cached(text)?
        .query_map(rusqlite::params_from_iter(args), |r| {
            Ok((
                r.get::<_, String>(0)?,
                u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
            ))
        })?
        .collect()
}

/// The statement reading one page of the walk after `after`, and its arguments.
pub(super) fn page_query(
    prefix: &str,
    selection: &ReplaySelection,
    bound: i64,
    after: &Position,
    limit: usize,
) -> Result<(String, Vec<Value>)> {
    let (mut terms, mut args) = terms(selection, bound)?;
    terms.push("e.rowid > ?");
    args.push(after.at.into());
    args.push(i64::try_from(limit).unwrap_or(i64::MAX).into());
    let text = format!(
        "SELECT {EVENT_COLUMNS}, e.rowid FROM {prefix}events e WHERE {} ORDER BY e.rowid LIMIT ? + 0",
        terms.join(" AND ")
    );
    Ok((text, args))
}

/// Runs a statement made by [`page_query`].
pub(super) fn page(
    conn: &Connection,
    text: &str,
    args: Vec<Value>,
) -> rusqlite::Result<Vec<(Position, Event)>> {
    conn.prepare_cached(text)?
        .query_map(rusqlite::params_from_iter(args), |r| {
            let at: i64 = r.get(EVENT_COLUMN_COUNT)?;
            Ok((
                Position {
                    at,
                    key: String::new(),
                },
                event_from_row(r)?,
            ))
        })?
        .collect()
}
