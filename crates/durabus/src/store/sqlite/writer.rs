//! The one writer thread. It owns the write connection and commits every request waiting in its
//! channel in one transaction (group commit), so many concurrent publishers share one fsync.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode, params};
use tokio::sync::{Notify, oneshot};

use super::rows::{EVENT_COLUMNS, event_from_row, json_list};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::event::{Event, EventId, NewEvent};
use crate::store::{InsertMode, Outcome, SubscriptionRow};

/// The due events a claim takes. `INDEXED BY` pins the partial index on due events: on a table
/// where most rows are pending the planner would otherwise pick the status index and scan past
/// claimed rows.
pub const DUE_QUERY: &str = "SELECT id FROM events INDEXED BY events_due
     WHERE status = 'pending' AND next_attempt_at <= ?1 ORDER BY next_attempt_at LIMIT ?2";

/// Most requests committed in one transaction.
const MAX_GROUP: usize = 512;

/// A write the thread performs.
#[derive(Debug)]
pub(super) enum Op {
    Insert(Vec<NewEvent>, InsertMode),
    Claim(usize),
    Record(Outcome),
    Recover,
    SaveSubscription(SubscriptionRow),
    DeleteSubscription(String),
    DlqRetry(EventId),
    DlqPurge(Timestamp),
}

/// What a write returns.
#[derive(Debug)]
pub(super) enum Reply {
    Unit,
    Events(Vec<Event>),
    Count(u64),
    Flag(bool),
}

/// A request on the channel.
pub(super) enum Msg {
    Write {
        op: Op,
        now: Timestamp,
        reply: oneshot::Sender<Result<Reply>>,
    },
    Close(oneshot::Sender<()>),
}

pub(super) struct Writer {
    pub conn: Connection,
    pub rx: Receiver<Msg>,
    pub lock_timeout: Duration,
    pub wake: Arc<Notify>,
    pub stats: Arc<super::WriteStats>,
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// Runs `f`, retrying with back-off while another process holds the write lock, for at most
/// `limit` in all.
pub(super) fn retry_busy<T>(
    limit: Duration,
    mut f: impl FnMut() -> rusqlite::Result<T>,
) -> Result<T> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match f() {
            Err(e) if is_busy(&e) => {
                if start.elapsed() >= limit {
                    return Err(Error::Locked(limit));
                }
                tracing::debug!(?pause, "database locked by another connection; retrying");
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            other => return other.map_err(Error::from),
        }
    }
}

impl Writer {
    /// Serves requests until closed or until every sender is gone.
    pub fn run(self) {
        let mut batch: Vec<(Op, Timestamp, oneshot::Sender<Result<Reply>>)> = Vec::new();
        let mut close: Option<oneshot::Sender<()>> = None;
        while close.is_none() {
            match self.rx.recv() {
                Ok(msg) => push(msg, &mut batch, &mut close),
                Err(_) => break,
            }
            while batch.len() < MAX_GROUP && close.is_none() {
                match self.rx.try_recv() {
                    Ok(msg) => push(msg, &mut batch, &mut close),
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            if !batch.is_empty() {
                self.commit_group(std::mem::take(&mut batch));
            }
        }
        // Fail whatever raced with the close, then drop the connection (which closes it).
        while let Ok(msg) = self.rx.try_recv() {
            if let Msg::Write { reply, .. } = msg {
                let _ = reply.send(Err(Error::StoreClosed));
            }
        }
        let _ = self.conn.execute_batch("PRAGMA optimize");
        drop(self.conn);
        if let Some(done) = close {
            let _ = done.send(());
        }
    }

    fn commit_group(&self, batch: Vec<(Op, Timestamp, oneshot::Sender<Result<Reply>>)>) {
        if let Err(e) = retry_busy(self.lock_timeout, || {
            self.conn.execute_batch("BEGIN IMMEDIATE")
        }) {
            for (_, _, reply) in batch {
                let _ = reply.send(Err(clone_err(&e)));
            }
            return;
        }
        let single = batch.len() == 1;
        let mut results = Vec::with_capacity(batch.len());
        let mut wake = false;
        for (op, now, reply) in batch {
            wake |= matches!(
                op,
                Op::Insert(_, InsertMode::Pending)
                    | Op::Record(Outcome::Retry { .. })
                    | Op::Recover
                    | Op::DlqRetry(_)
            );
            // Each request in its own savepoint: one failing request does not undo the others.
            let res = if single {
                apply(&self.conn, op, now)
            } else {
                self.conn
                    .execute_batch("SAVEPOINT req")
                    .map_err(Error::from)
                    .and_then(|()| match apply(&self.conn, op, now) {
                        Ok(r) => self
                            .conn
                            .execute_batch("RELEASE req")
                            .map(|()| r)
                            .map_err(Error::from),
                        Err(e) => {
                            let _ = self.conn.execute_batch("ROLLBACK TO req; RELEASE req");
                            Err(e)
                        }
                    })
            };
            results.push((res, reply));
        }
        if single && results.first().is_some_and(|(r, _)| r.is_err()) {
            // Alone in its transaction: undo whatever part of it ran.
            let _ = self.conn.execute_batch("ROLLBACK");
            for (res, reply) in results {
                let _ = reply.send(res);
            }
            return;
        }
        let committed = retry_busy(self.lock_timeout, || self.conn.execute_batch("COMMIT"));
        if let Err(e) = committed {
            let _ = self.conn.execute_batch("ROLLBACK");
            for (_, reply) in results {
                let _ = reply.send(Err(clone_err(&e)));
            }
            return;
        }
        self.stats.transactions.fetch_add(1, Ordering::Relaxed);
        self.stats
            .requests
            .fetch_add(results.len() as u64, Ordering::Relaxed);
        if wake {
            self.wake.notify_one();
        }
        for (res, reply) in results {
            let _ = reply.send(res);
        }
    }
}

fn push(
    msg: Msg,
    batch: &mut Vec<(Op, Timestamp, oneshot::Sender<Result<Reply>>)>,
    close: &mut Option<oneshot::Sender<()>>,
) {
    match msg {
        Msg::Write { op, now, reply } => batch.push((op, now, reply)),
        Msg::Close(done) => *close = Some(done),
    }
}

fn clone_err(e: &Error) -> Error {
    match e {
        Error::Locked(d) => Error::Locked(*d),
        other => Error::Database(other.to_string()),
    }
}

fn apply(conn: &Connection, op: Op, now: Timestamp) -> Result<Reply> {
    let now_ms = now.as_millis();
    Ok(match op {
        Op::Insert(events, mode) => {
            let (status, due) = match mode {
                InsertMode::Pending => ("pending", Some(now_ms)),
                InsertMode::Claimed => ("processing", None),
            };
            let mut stmt = conn.prepare_cached(
                "INSERT INTO events (id, type, payload, status, metadata, created_at, updated_at, next_attempt_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7)",
            )?;
            for e in events {
                let metadata = if e.metadata.is_empty() {
                    None
                } else {
                    Some(serde_json::to_string(&e.metadata)?)
                };
                stmt.execute(params![
                    e.id.to_string(),
                    e.event_type,
                    e.payload,
                    status,
                    metadata,
                    now_ms,
                    due
                ])?;
            }
            Reply::Unit
        }
        Op::Claim(limit) => {
            let mut stmt = conn.prepare_cached(&format!(
                "UPDATE events SET status = 'processing', updated_at = ?1
                 WHERE id IN ({DUE_QUERY})
                 RETURNING {EVENT_COLUMNS}"
            ))?;
            let mut events = stmt
                .query_map(params![now_ms, i64::try_from(limit).unwrap_or(i64::MAX)], event_from_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            events.sort_by_key(|e| (e.next_attempt_at, e.id));
            Reply::Events(events)
        }
        Op::Record(outcome) => {
            let n = match outcome {
                Outcome::Done { id, delivered } => conn
                    .prepare_cached(
                        "UPDATE events SET status = 'done', delivered = ?2, updated_at = ?3, next_attempt_at = NULL
                         WHERE id = ?1 AND status = 'processing'",
                    )?
                    .execute(params![id.to_string(), json_list(&delivered), now_ms])?,
                Outcome::Retry { id, retry_count, errors, delivered, next_attempt_at } => conn
                    .prepare_cached(
                        "UPDATE events SET status = 'pending', retry_count = ?2, last_error = ?3, delivered = ?4,
                             updated_at = ?5, next_attempt_at = ?6
                         WHERE id = ?1 AND status = 'processing'",
                    )?
                    .execute(params![
                        id.to_string(),
                        retry_count,
                        json_list(&errors),
                        json_list(&delivered),
                        now_ms,
                        next_attempt_at.as_millis()
                    ])?,
                Outcome::Dead { id, retry_count, errors, delivered } => conn
                    .prepare_cached(
                        "UPDATE events SET status = 'dlq', retry_count = ?2, last_error = ?3, delivered = ?4,
                             updated_at = ?5, dlq_at = ?5, next_attempt_at = NULL
                         WHERE id = ?1 AND status = 'processing'",
                    )?
                    .execute(params![
                        id.to_string(),
                        retry_count,
                        json_list(&errors),
                        json_list(&delivered),
                        now_ms
                    ])?,
            };
            Reply::Flag(n == 1)
        }
        Op::Recover => {
            let n = conn.execute(
                "UPDATE events SET status = 'pending', retry_count = retry_count + 1,
                     last_error = json_insert(coalesce(last_error, '[]'), '$[#]',
                         'interrupted: the process stopped during this attempt'),
                     updated_at = ?1, next_attempt_at = ?1
                 WHERE status = 'processing'",
                [now_ms],
            )?;
            Reply::Count(n as u64)
        }
        Op::SaveSubscription(row) => {
            if let Some(name) = &row.name {
                conn.execute("DELETE FROM subscriptions WHERE name = ?1 AND id <> ?2", params![name, row.id])?;
            }
            conn.execute(
                "INSERT INTO subscriptions (id, name, event_type, created_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(id) DO UPDATE SET name = excluded.name, event_type = excluded.event_type",
                params![row.id, row.name, row.event_type, row.created_at.as_millis()],
            )?;
            Reply::Unit
        }
        Op::DeleteSubscription(id) => {
            Reply::Flag(conn.execute("DELETE FROM subscriptions WHERE id = ?1", [id])? == 1)
        }
        Op::DlqRetry(id) => Reply::Flag(
            conn.execute(
                "UPDATE events SET status = 'pending', retry_count = 0, last_error = NULL, dlq_at = NULL,
                     updated_at = ?2, next_attempt_at = ?2
                 WHERE id = ?1 AND status = 'dlq'",
                params![id.to_string(), now_ms],
            )? == 1,
        ),
        Op::DlqPurge(cutoff) => Reply::Count(conn.execute(
            "DELETE FROM events WHERE status = 'dlq' AND created_at <= ?1",
            [cutoff.as_millis()],
        )? as u64),
    })
}
