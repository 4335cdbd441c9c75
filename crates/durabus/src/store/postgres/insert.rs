//! Inserting events, with group commit: a commit on PostgreSQL costs a WAL flush and a round
//! trip, so single-event publishes from many concurrent callers are gathered and written as one
//! multi-row statement. While some statements are in flight, new requests queue up and go out
//! together in the next one.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use sqlx::postgres::PgPool;
use sqlx::{PgConnection, Row};
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};
use uuid::Uuid;

use super::q;
use super::sql::PgSql;
use crate::error::{Error, Result};
use crate::event::{EventId, NewEvent};

/// Requests with more events than this are written on their own (they are a batch already).
pub(super) const GROUP_MAX_EVENTS: usize = 100;
/// Most requests gathered into one statement.
const GROUP_MAX_REQUESTS: usize = 256;
/// Group statements in flight at once.
const IN_FLIGHT: usize = 4;

/// One caller's insert.
pub(super) struct Request {
    pub events: Vec<NewEvent>,
    pub now: i64,
    pub claimed: bool,
    pub reply: oneshot::Sender<Result<Vec<bool>>>,
}

/// What an insert needs, shared by the store and its group-commit task.
#[derive(Clone, Debug)]
pub(super) struct Inserter {
    pub pool: PgPool,
    pub sql: Arc<PgSql>,
    pub channel: String,
    pub worker: String,
    pub lease_ms: i64,
    pub held: Arc<Mutex<HashMap<EventId, Uuid>>>,
    pub wake: Arc<Notify>,
}

/// The parameters of one insert statement.
pub(super) struct Rows<'a> {
    pub events: Vec<&'a NewEvent>,
    pub created: Vec<i64>,
}

/// Runs the insert statement for `rows` on `conn` (the application's transaction, for the
/// outbox) and returns the ids stored.
pub(super) async fn insert_rows(
    conn: &mut PgConnection,
    sql: &PgSql,
    rows: &Rows<'_>,
    lease: Option<(&str, Uuid, i64)>,
    channel: Option<&str>,
) -> Result<Vec<Uuid>> {
    let ids: Vec<Uuid> = rows.events.iter().map(|e| e.id.0).collect();
    let types: Vec<&str> = rows.events.iter().map(|e| e.event_type.as_str()).collect();
    let payloads: Vec<&str> = rows.events.iter().map(|e| e.payload.as_str()).collect();
    let metadata = rows
        .events
        .iter()
        .map(|e| {
            if e.metadata.is_empty() {
                Ok(None)
            } else {
                serde_json::to_string(&e.metadata).map(Some)
            }
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let stored = q(&sql.insert)
        .bind(&ids)
        .bind(&types)
        .bind(&payloads)
        .bind(&metadata)
        .bind(&rows.created)
        .bind(lease.is_some())
        .bind(lease.map(|l| l.0))
        .bind(lease.map(|l| l.1))
        .bind(lease.map(|l| l.2))
        .bind(channel)
        .fetch_all(conn)
        .await?;
    stored
        .iter()
        .map(|r| r.try_get::<Uuid, _>(0).map_err(Error::from))
        .collect()
}

impl Inserter {
    /// Writes `requests` (all claimed or all not) in one statement and answers each; if the
    /// statement fails, each request is written alone so one bad request fails only itself.
    pub async fn write(&self, requests: Vec<Request>) {
        if requests.len() > 1 {
            if let Ok(stored) = self.statement(&requests).await {
                let mut fresh: HashSet<Uuid> = stored.into_iter().collect();
                for r in requests {
                    let flags = flags(&r.events, &mut fresh);
                    let _ = r.reply.send(Ok(flags));
                }
                return;
            }
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
        };
        for r in requests {
            for e in &r.events {
                rows.events.push(e);
                rows.created.push(r.now);
            }
        }
        let token = Uuid::now_v7();
        let lease = claimed.then_some((self.worker.as_str(), token, self.lease_ms));
        let channel = (!claimed).then_some(self.channel.as_str());
        let mut conn = self.pool.acquire().await?;
        let stored = insert_rows(&mut conn, &self.sql, &rows, lease, channel).await?;
        if claimed {
            let mut held = self
                .held
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for id in &stored {
                held.insert(EventId(*id), token);
            }
        } else if !stored.is_empty() {
            self.wake.notify_one();
        }
        Ok(stored)
    }
}

/// One flag per event: stored by this statement, and the first of its id (an id given twice
/// is stored once, for the first caller).
fn flags(events: &[NewEvent], fresh: &mut HashSet<Uuid>) -> Vec<bool> {
    events.iter().map(|e| fresh.remove(&e.id.0)).collect()
}

/// The group-commit task: gathers waiting requests, splits them into claimed and not, and
/// writes each group in one statement, with up to a few statements in flight.
pub(super) async fn run(inserter: Inserter, mut rx: mpsc::UnboundedReceiver<Request>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut buf = Vec::with_capacity(GROUP_MAX_REQUESTS);
    loop {
        // Wait for a free slot first: requests keep queueing meanwhile and go out together.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        if rx.recv_many(&mut buf, GROUP_MAX_REQUESTS).await == 0 {
            return;
        }
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
