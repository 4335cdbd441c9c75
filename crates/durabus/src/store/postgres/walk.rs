//! Walking stored events for a replay on PostgreSQL: by creation time, then id, over the live
//! table and the event log together (each half on its `(created_at, id)` index).

use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use uuid::Uuid;

use super::q;
use super::sql::{EVENT_COLUMNS, LOG_COLUMNS};
use crate::replay::ReplaySelection;
use crate::store::Position;

/// One bound value of a walk statement.
enum Arg {
    Int(i64),
    Id(Uuid),
    Ids(Vec<Uuid>),
    Texts(Vec<String>),
}

/// A walk statement: its text and values, in order.
pub(super) struct Statement {
    text: String,
    args: Vec<Arg>,
}

impl Statement {
    /// The query, values bound.
    pub fn query(&self) -> Query<'static, sqlx::Postgres, PgArguments> {
        let mut query = q(&self.text);
        for arg in &self.args {
            query = match arg {
                Arg::Int(v) => query.bind(*v),
                Arg::Id(v) => query.bind(*v),
                Arg::Ids(v) => query.bind(v.clone()),
                Arg::Texts(v) => query.bind(v.clone()),
            };
        }
        query
    }
}

/// A type pattern as a `LIKE` pattern: `*` is `%`; `_` (and the escape) are escaped.
fn like(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 4);
    for c in pattern.chars() {
        match c {
            '*' => out.push('%'),
            '%' | '_' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// The `WHERE` terms for `selection` up to `bound` (used on both tables), their values.
fn terms(
    selection: &ReplaySelection,
    bound: &Position,
    after: Option<&Position>,
) -> (String, Vec<Arg>) {
    let mut args = vec![Arg::Int(bound.at), Arg::Id(key(bound))];
    let mut terms = vec!["(created_at, id) <= ($1, $2::uuid)".to_owned()];
    let mut push = |term: &str, arg: Arg, args: &mut Vec<Arg>| {
        args.push(arg);
        terms.push(term.replace('?', &format!("${}", args.len())));
    };
    if let Some(from) = selection.from {
        push("created_at >= ?", Arg::Int(from.as_millis()), &mut args);
    }
    if let Some(to) = selection.to {
        push("created_at < ?", Arg::Int(to.as_millis()), &mut args);
    }
    if !selection.ids.is_empty() {
        let ids = selection.ids.iter().map(|id| id.0).collect();
        push("id = ANY(?::uuid[])", Arg::Ids(ids), &mut args);
    }
    if !selection.statuses.is_empty() {
        let st = selection
            .statuses
            .iter()
            .map(|s| s.as_str().to_owned())
            .collect();
        push("status = ANY(?::text[])", Arg::Texts(st), &mut args);
    }
    if !selection.types.is_empty() {
        let pats = selection.types.iter().map(|t| like(t)).collect();
        push("type LIKE ANY(?::text[])", Arg::Texts(pats), &mut args);
    }
    if let Some(after) = after {
        args.push(Arg::Int(after.at));
        let n = args.len();
        args.push(Arg::Id(key(after)));
        terms.push(format!("(created_at, id) > (${n}, ${}::uuid)", n + 1));
    }
    if !selection.includes_system() {
        terms.push("type NOT LIKE 'system.%'".to_owned());
    }
    (terms.join(" AND "), args)
}

/// A position's id (the nil id, before every other, for the default position).
fn key(position: &Position) -> Uuid {
    Uuid::parse_str(&position.key).unwrap_or(Uuid::nil())
}

/// The highest `(created_at, id)` stored at or before `$1` (ms), over both tables: the bound
/// of a walk frozen then. No row: nothing is stored yet.
pub(super) fn bound(schema: &str) -> String {
    format!(
        "SELECT created_at, id FROM (
             (SELECT created_at, id FROM {schema}.events WHERE created_at <= $1
              ORDER BY created_at DESC, id DESC LIMIT 1)
             UNION ALL
             (SELECT created_at, id FROM {schema}.event_log WHERE created_at <= $1
              ORDER BY created_at DESC, id DESC LIMIT 1)) AS b
         ORDER BY created_at DESC, id DESC LIMIT 1"
    )
}

/// Counts per type of what `selection` covers up to `bound`.
pub(super) fn count(schema: &str, selection: &ReplaySelection, bound: &Position) -> Statement {
    let (terms, args) = terms(selection, bound, None);
    Statement {
        text: format!(
            "SELECT type, count(*) AS n FROM (
                 SELECT type FROM {schema}.events WHERE {terms}
                 UNION ALL SELECT type FROM {schema}.event_log WHERE {terms}) AS w
             GROUP BY type"
        ),
        args,
    }
}

/// One page of the walk after `after`.
pub(super) fn page(
    schema: &str,
    selection: &ReplaySelection,
    bound: &Position,
    after: &Position,
    limit: usize,
) -> Statement {
    let (terms, mut args) = terms(selection, bound, Some(after));
    args.push(Arg::Int(i64::try_from(limit).unwrap_or(i64::MAX)));
    let n = args.len();
    Statement {
        text: format!(
            "SELECT * FROM (
                 (SELECT {EVENT_COLUMNS} FROM {schema}.events WHERE {terms}
                  ORDER BY created_at, id LIMIT ${n})
                 UNION ALL
                 (SELECT {LOG_COLUMNS} FROM {schema}.event_log WHERE {terms}
                  ORDER BY created_at, id LIMIT ${n})) AS w
             ORDER BY created_at, id LIMIT ${n}"
        ),
        args,
    }
}

#[cfg(test)]
mod tests {
    use super::like;

    #[test]
    fn patterns_become_like_patterns() {
        assert_eq!(like("order.*"), "order.%");
        assert_eq!(like("system.dead_letter"), "system.dead\\_letter");
        assert_eq!(like("*"), "%");
    }
}
