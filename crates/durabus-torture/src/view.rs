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
