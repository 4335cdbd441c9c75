//! The store as the checker sees it after the drain, read through the bus's public queries.

use std::collections::HashMap;

use durabus::{DeadLetterFilter, EventId, EventQuery, Keyset};

use crate::check::Stored;
use crate::target::Target;

/// Every event and its dead-letter record, if any.
pub async fn stored(target: &Target) -> anyhow::Result<HashMap<EventId, Stored>> {
    let bus = target.reader().await?;
    let store = bus.store();
    let mut out = HashMap::new();
    let mut offset = 0;
    loop {
        let page = store
            .list_events(EventQuery {
                offset,
                limit: 1000,
                ..EventQuery::default()
            })
            .await?;
        offset += page.len() as u64;
        for e in &page {
            // The bus's own announcements (`system.*`, e.g. a dead letter's) are not the
            // suite's events.
            if e.event_type.starts_with("system.") {
                continue;
            }
            out.insert(
                e.id,
                Stored {
                    status: e.status,
                    dead_letter: None,
                },
            );
        }
        if page.len() < 1000 {
            break;
        }
    }
    let mut before = None;
    loop {
        let page = store
            .dlq_list(
                DeadLetterFilter::default(),
                Keyset {
                    before,
                    limit: 1000,
                },
            )
            .await?;
        for d in &page {
            if d.event_type.starts_with("system.") {
                continue;
            }
            match out.get_mut(&d.event_id) {
                Some(s) => s.dead_letter = Some(d.status),
                None => anyhow::bail!("dead letter {} has no event", d.event_id),
            }
        }
        match page.last() {
            Some(last) if page.len() == 1000 => before = Some(last.seq),
            _ => break,
        }
    }
    bus.shutdown().await?;
    Ok(out)
}

/// `PRAGMA integrity_check` of a SQLite file, read-only (nothing of the hot WAL is
/// checkpointed away before the next life opens it).
pub fn integrity(path: &std::path::Path) -> anyhow::Result<String> {
    use durabus::rusqlite::{Connection, OpenFlags};
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    let rows: Vec<String> = conn
        .prepare("PRAGMA integrity_check")?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    Ok(rows.join("; "))
}

/// The events the store holds `processing` right now: read with plain SQL (SQLite read-only,
/// so the hot WAL stays for the next life to recover), right after a kill: the events that
/// process had in flight (on PostgreSQL, with those of the workers still running).
pub fn processing(target: &Target) -> anyhow::Result<std::collections::HashSet<EventId>> {
    match target {
        Target::Sqlite(path) => {
            use durabus::rusqlite::{Connection, OpenFlags};
            if !path.exists() {
                return Ok(Default::default());
            }
            let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
            conn.busy_timeout(std::time::Duration::from_secs(10))?;
            let exists: bool = conn.query_row(
                "SELECT count(*) > 0 FROM sqlite_master WHERE name = 'durabus_events'",
                [],
                |r| r.get(0),
            )?;
            if !exists {
                return Ok(Default::default());
            }
            let ids: Vec<String> = conn
                .prepare("SELECT id FROM durabus_events WHERE status = 'processing'")?
                .query_map([], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            ids.iter()
                .map(|s| Ok(s.parse::<EventId>()?))
                .collect::<anyhow::Result<_>>()
        }
        Target::Postgres { url, schema } => pg_ids(
            url,
            format!("SELECT id FROM {schema}.events WHERE status = 'processing'"),
            None,
        ),
    }
}

/// The events a PostgreSQL store holds `processing` since before `before` (milliseconds since
/// the epoch, on the workers' clock): those claimed before then and not finished since.
pub fn processing_since_before(
    target: &Target,
    before: i64,
) -> anyhow::Result<std::collections::HashSet<EventId>> {
    let Target::Postgres { url, schema } = target else {
        anyhow::bail!("PostgreSQL only");
    };
    pg_ids(
        url,
        format!(
            "SELECT id FROM {schema}.events
             WHERE status = 'processing' AND processing_started_at < $1::bigint"
        ),
        Some(before.to_string()),
    )
}

/// The events a PostgreSQL worker process `pid` holds (`processing` under its lease).
pub fn held_by_pid(
    target: &Target,
    pid: u32,
) -> anyhow::Result<std::collections::HashSet<EventId>> {
    let Target::Postgres { url, schema } = target else {
        anyhow::bail!("leases are PostgreSQL's");
    };
    pg_ids(
        url,
        format!(
            "SELECT id FROM {schema}.events
             WHERE status = 'processing' AND lease_owner LIKE '%:' || $1 || ':%'"
        ),
        Some(pid.to_string()),
    )
}

/// The events a PostgreSQL store holds unfinished (neither done nor dead-lettered).
pub fn unfinished(target: &Target) -> anyhow::Result<std::collections::HashSet<EventId>> {
    let Target::Postgres { url, schema } = target else {
        anyhow::bail!("PostgreSQL only");
    };
    pg_ids(
        url,
        format!("SELECT id FROM {schema}.events WHERE status NOT IN ('done', 'dlq', 'cancelled')"),
        None,
    )
}

/// The ids a statement (with at most one text parameter) returns on PostgreSQL at `url`.
fn pg_ids(
    url: &str,
    sql: String,
    param: Option<String>,
) -> anyhow::Result<std::collections::HashSet<EventId>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let pool = crate::target::pg_pool(url).await?;
        let mut query = durabus::sqlx::query_as(durabus::sqlx::AssertSqlSafe(sql));
        if let Some(p) = param {
            query = query.bind(p);
        }
        let rows: Vec<(uuid::Uuid,)> = query.fetch_all(&pool).await?;
        pool.close().await;
        Ok(rows.into_iter().map(|(id,)| EventId(id)).collect())
    })
}
