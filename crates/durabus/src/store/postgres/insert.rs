//! Inserting events, with group commit: a commit on PostgreSQL costs a WAL flush and a round
//! trip, so single-event publishes from many concurrent callers are gathered and written as one
//! multi-row statement. While some statements are in flight, new requests queue up and go out
//! together in the next one. A request that finds nothing queued and a statement slot free is
//! written at once on its caller's task: a lone caller pays for no hand-over to another task.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use sqlx::{PgConnection, Row};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use uuid::Uuid;

use super::q;
use super::sql::PgSql;
use crate::error::{Error, Result};
use crate::event::{EventId, NewEvent};
use crate::payload::NewSnapshot;
use crate::store::Stored;

/// Requests with more events than this are written on their own (they are a batch already).
pub(super) const GROUP_MAX_EVENTS: usize = 100;
/// Most requests gathered into one statement.
const GROUP_MAX_REQUESTS: usize = 256;
/// Insert statements in flight at once (group statements and direct writes together).
pub(super) const IN_FLIGHT: usize = 4;

/// One caller's insert.
pub(super) struct Request {
    pub events: Vec<NewEvent>,
    pub snapshots: Vec<NewSnapshot>,
    pub now: i64,
    pub claimed: bool,
    pub reply: oneshot::Sender<Result<Vec<Stored>>>,
}

/// What an insert needs, shared by the store and its group-commit task.
#[derive(Clone, Debug)]
pub(super) struct Inserter {
    pub pool: super::pool::Pool,
    pub sql: Arc<PgSql>,
    pub channel: String,
    pub worker: String,
    pub lease_ms: i64,
    pub held: Arc<Mutex<HashMap<EventId, Uuid>>>,
    pub wake: Arc<Notify>,
    /// The statement slots ([`IN_FLIGHT`]), shared by the group-commit task and direct writes.
    pub slots: Arc<Semaphore>,
    /// Requests sent to the group-commit task and not yet taken by it.
    pub queued: Arc<AtomicUsize>,
}

/// `snapshots` as this store writes them, each a row of its own: a shared snapshot (the
/// payload as published) is compressed from its event's payload here, on the caller's task.
pub(super) fn own_rows(
    events: &[NewEvent],
    mut snapshots: Vec<NewSnapshot>,
) -> Result<Vec<NewSnapshot>> {
    for s in snapshots.iter_mut().filter(|s| s.shared) {
        if let Some(e) = events.iter().find(|e| e.id == s.event_id) {
            s.fill(&e.payload)?;
        }
    }
    snapshots.retain(|s| !s.shared);
    Ok(snapshots)
}

/// The parameters of one insert statement.
pub(super) struct Rows<'a> {
    pub events: Vec<&'a NewEvent>,
    pub created: Vec<i64>,
    pub snapshots: Vec<&'a NewSnapshot>,
    /// Which events wait behind their ordering key (no due time); empty: none.
    pub parked: Vec<bool>,
}

/// Runs the insert statement for `rows` on `conn` (the application's transaction, for the
/// outbox) and returns the ids stored.
pub(super) async fn insert_rows(
    conn: &mut PgConnection,
    sql: &PgSql,
    rows: &Rows<'_>,
    lease: Option<(&str, Uuid, i64)>,
    notify: Option<Notice<'_>>,
) -> Result<Vec<Uuid>> {
    let ids: Vec<Uuid> = rows.events.iter().map(|e| e.id.0).collect();
    let types: Vec<&str> = rows.events.iter().map(|e| e.event_type.as_str()).collect();
    let payloads: Vec<&str> = rows.events.iter().map(|e| e.payload.as_str()).collect();
    let metadata = rows
        .events
        .iter()
        .map(|e| e.metadata_json())
        .collect::<Result<Vec<_>>>()?;
    // The first ten parameters, the same in both statements.
    let events = |statement| {
        q(statement)
            .bind(&ids)
            .bind(&types)
            .bind(&payloads)
            .bind(&metadata)
            .bind(&rows.created)
            .bind(lease.is_some())
            .bind(lease.map(|l| l.0))
            .bind(lease.map(|l| l.1))
            .bind(lease.map(|l| l.2))
            .bind(notify.map(|n| n.channel))
    };
    let stored = if is_plain(rows, &ids) {
        events(&sql.insert_plain)
            .bind(notify.map_or("", |n| n.from))
            .fetch_all(conn)
            .await?
    } else {
        full(rows, events(&sql.insert), notify)
            .fetch_all(conn)
            .await?
    };
    stored
        .iter()
        .map(|r| r.try_get::<Uuid, _>(0).map_err(Error::from))
        .collect()
}

/// The full statement's parameters after the first ten: the snapshots, the notification's
/// payload and the publish options.
fn full<'q>(
    rows: &'q Rows<'_>,
    events: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    notify: Option<Notice<'q>>,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    let due: Vec<Option<i64>> = rows
        .events
        .iter()
        .zip(&rows.created)
        .map(|(e, created)| {
            e.due_at(crate::clock::Timestamp(*created))
                .map(crate::clock::Timestamp::as_millis)
        })
        .collect();
    let priorities: Vec<i16> = rows
        .events
        .iter()
        .map(|e| e.options.priority_value())
        .collect();
    let keys: Vec<Option<&str>> = rows
        .events
        .iter()
        .map(|e| e.options.ordering_key_value())
        .collect();
    let parked: Vec<bool> = if rows.parked.is_empty() {
        vec![false; rows.events.len()]
    } else {
        rows.parked.clone()
    };
    let snaps = SnapshotColumns::of(&rows.snapshots);
    snaps
        .bind(events)
        .bind(notify.map_or("", |n| n.from))
        .bind(due)
        .bind(priorities)
        .bind(keys)
        .bind(parked)
}

/// Whether `rows` can go out as the plain statement ([`PgSql::insert_plain`]): no snapshots,
/// no event with publish options (a due time, a priority, an ordering key; so none is parked)
/// and no id given twice.
fn is_plain(rows: &Rows<'_>, ids: &[Uuid]) -> bool {
    rows.snapshots.is_empty()
        && !rows.parked.iter().any(|p| *p)
        && rows.events.iter().zip(&rows.created).all(|(e, created)| {
            e.options.priority_value() == 0
                && e.options.ordering_key_value().is_none()
                && e.due_at(crate::clock::Timestamp(*created)).is_none()
        })
        && {
            let mut seen = HashSet::with_capacity(ids.len());
            ids.iter().all(|id| seen.insert(*id))
        }
}

/// The notification an insert sends on commit when it stores events.
#[derive(Debug, Clone, Copy)]
pub(super) struct Notice<'a> {
    /// The channel the workers listen on.
    pub channel: &'a str,
    /// Who sent it: the inserting store's worker identity when that store wakes its own
    /// dispatcher already (its listener then ignores the echo), empty when the commit is the
    /// application's (the outbox, in its transaction).
    pub from: &'a str,
}

impl<'a> Notice<'a> {
    /// A notification every listener acts on, this process's too.
    pub fn to_all(channel: &'a str) -> Notice<'a> {
        Notice { channel, from: "" }
    }
}

/// Payload snapshots as the arrays of one statement, one snapshot per key (the first).
pub(super) struct SnapshotColumns {
    event_id: Vec<Uuid>,
    stage: Vec<String>,
    created_at: Vec<i64>,
    event_type: Vec<String>,
    blob: Vec<Vec<u8>>,
    size_original: Vec<i64>,
    size_compressed: Vec<i64>,
    media: Vec<bool>,
    base64: Vec<bool>,
}

impl SnapshotColumns {
    pub fn of(snapshots: &[&NewSnapshot]) -> SnapshotColumns {
        let mut c = SnapshotColumns {
            event_id: Vec::new(),
            stage: Vec::new(),
            created_at: Vec::new(),
            event_type: Vec::new(),
            blob: Vec::new(),
            size_original: Vec::new(),
            size_compressed: Vec::new(),
            media: Vec::new(),
            base64: Vec::new(),
        };
        let mut seen = HashSet::new();
        for s in snapshots {
            if !seen.insert((s.event_id, s.stage.as_str(), s.created_at)) {
                continue;
            }
            c.event_id.push(s.event_id.0);
            c.stage.push(s.stage.clone());
            c.created_at.push(s.created_at.as_millis());
            c.event_type.push(s.event_type.clone());
            c.size_compressed
                .push(i64::try_from(s.blob.len()).unwrap_or(i64::MAX));
            c.blob.push(s.blob.clone());
            c.size_original
                .push(i64::try_from(s.size_original).unwrap_or(i64::MAX));
            c.media.push(s.flags.contains_media);
            c.base64.push(s.flags.contains_base64);
        }
        c
    }

    /// Binds the nine arrays, in the order the statements take them.
    pub fn bind<'q>(
        self,
        q: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        q.bind(self.event_id)
            .bind(self.stage)
            .bind(self.created_at)
            .bind(self.event_type)
            .bind(self.blob)
            .bind(self.size_original)
            .bind(self.size_compressed)
            .bind(self.media)
            .bind(self.base64)
    }
}

impl Inserter {
    /// A statement slot for writing a request at once on the caller's task, if nothing is
    /// queued for the group-commit task (queued requests go first, together) and a slot is free.
    pub fn direct_slot(&self) -> Option<OwnedSemaphorePermit> {
        if self.queued.load(Ordering::Acquire) > 0 {
            return None;
        }
        self.slots.clone().try_acquire_owned().ok()
    }

    /// Writes `requests` (all claimed or all not) in one statement and answers each; if the
    /// statement fails, each request is written alone so one bad request fails only itself.
    pub async fn write(&self, requests: Vec<Request>) {
        if requests.len() > 1
            && let Ok(stored) = self.statement(&requests).await
        {
            let mut fresh: HashSet<Uuid> = stored.into_iter().collect();
            for r in requests {
                let flags = flags(&r.events, &mut fresh);
                let _ = r.reply.send(Ok(flags));
            }
            return;
        }
        for r in requests {
            let result = self.statement(std::slice::from_ref(&r)).await;
            let flags = result.map(|stored| flags(&r.events, &mut stored.into_iter().collect()));
            let _ = r.reply.send(flags);
        }
    }

    async fn statement(&self, requests: &[Request]) -> Result<Vec<Uuid>> {
        let claimed = requests.first().is_some_and(|r| r.claimed);
        let mut rows = Rows {
            events: Vec::new(),
            created: Vec::new(),
            snapshots: Vec::new(),
            parked: Vec::new(),
        };
        for r in requests {
            for e in &r.events {
                rows.events.push(e);
                rows.created.push(r.now);
            }
            rows.snapshots.extend(r.snapshots.iter());
        }
        let mut conn = self.pool.acquire().await?;
        // One statement stores and commits in one go here: the point fires just before it.
        crate::fail_point!("insert.before_commit");
        let (stored, token) = self.store_rows(&mut conn, &rows, claimed).await?;
        self.hold(&stored, token);
        Ok(stored)
    }

    /// Runs the insert statement for `rows` on `conn`, claimed (under a new lease token, also
    /// returned) or pending (with a NOTIFY on commit); returns the ids stored.
    pub(super) async fn store_rows(
        &self,
        conn: &mut PgConnection,
        rows: &Rows<'_>,
        claimed: bool,
    ) -> Result<(Vec<Uuid>, Option<Uuid>)> {
        let token = claimed.then(Uuid::now_v7);
        let lease = token.map(|t| (self.worker.as_str(), t, self.lease_ms));
        let notify = (!claimed).then_some(Notice {
            channel: &self.channel,
            from: &self.worker,
        });
        // Pending events wake the local dispatcher however this ends, also when the caller's
        // future is dropped after the commit (a direct write runs on the caller's task): this
        // store's listener ignores the NOTIFY echo of its own inserts.
        let _wake = (!claimed).then(|| WakeOnDrop(&self.wake));
        let stored = insert_rows(conn, &self.sql, rows, lease, notify).await?;
        Ok((stored, token))
    }

    /// Notes the claimed events `stored` under their lease `token` (once they are committed).
    pub(super) fn hold(&self, stored: &[Uuid], token: Option<Uuid>) {
        if let Some(token) = token {
            let mut held = crate::sync::lock(&self.held);
            for id in stored {
                held.insert(EventId(*id), token);
            }
        }
    }
}

/// Wakes the dispatcher when dropped.
struct WakeOnDrop<'a>(&'a Notify);

impl Drop for WakeOnDrop<'_> {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

/// One [`Stored`] per event: new if stored by this statement and the first of its id (an id
/// given twice is stored once, for the first caller), else known.
pub(super) fn flags(events: &[NewEvent], fresh: &mut HashSet<Uuid>) -> Vec<Stored> {
    events
        .iter()
        .map(|e| {
            if fresh.remove(&e.id.0) {
                Stored::New
            } else {
                Stored::Known
            }
        })
        .collect()
}

/// The group-commit task: gathers waiting requests, splits them into claimed and not, and
/// writes each group in one statement, with up to a few statements in flight.
pub(super) async fn run(inserter: Inserter, mut rx: mpsc::UnboundedReceiver<Request>) {
    let slots = inserter.slots.clone();
    let mut buf = Vec::with_capacity(GROUP_MAX_REQUESTS);
    loop {
        // Wait for a free slot first: requests keep queueing meanwhile and go out together.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let taken = rx.recv_many(&mut buf, GROUP_MAX_REQUESTS).await;
        if taken == 0 {
            return;
        }
        inserter.queued.fetch_sub(taken, Ordering::AcqRel);
        let (claimed, pending): (Vec<Request>, Vec<Request>) =
            buf.drain(..).partition(|r| r.claimed);
        let inserter = inserter.clone();
        tokio::spawn(async move {
            if !pending.is_empty() {
                inserter.write(pending).await;
            }
            if !claimed.is_empty() {
                inserter.write(claimed).await;
            }
            drop(slot);
        });
    }
}
