//! The one writer thread. It owns the write connection and commits every request waiting in its
//! channel in one transaction (group commit), so many concurrent publishers share one fsync.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode, params};
use tokio::sync::{Notify, oneshot};

use super::rows::{event_from_row, json_list};
use super::sql::Sql;
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::event::{Event, EventId, NewEvent};
use crate::store::{InsertMode, Outcome, SubscriptionRow};

/// Most requests committed in one transaction.
const MAX_GROUP: usize = 512;

/// A write the thread performs.
#[derive(Debug)]
pub(super) enum Op {
    Insert(Vec<NewEvent>, InsertMode),
    PurgeHistory(Timestamp, usize),
    Claim(usize),
    Record(Outcome),
    RecordMany(Vec<Outcome>),
    Release(Vec<EventId>),
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
    Flags(Vec<bool>),
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
    pub sql: Arc<Sql>,
    pub rx: Receiver<Msg>,
    pub lock_timeout: Duration,
    pub wake: Arc<Notify>,
    pub stats: Arc<super::WriteStats>,
    pub checkpoint: std::sync::mpsc::Sender<super::checkpoint::Stop>,
    pub committed: Arc<std::sync::atomic::AtomicBool>,
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
        let _ = self.checkpoint.send(super::checkpoint::Stop);
        let _ = self.conn.execute_batch("PRAGMA optimize");
        // The last connection to close checkpoints the whole WAL back into the database.
        let _ = self.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)");
        drop(self.conn);
        if let Some(done) = close {
            let _ = done.send(());
        }
    }

    fn commit_group(&self, batch: Vec<(Op, Timestamp, oneshot::Sender<Result<Reply>>)>) {
        let wake = batch.iter().any(|(op, _, _)| {
            matches!(
                op,
                Op::Insert(_, InsertMode::Pending)
                    | Op::Record(Outcome::Retry { .. })
                    | Op::Recover
                    | Op::Release(_)
                    | Op::DlqRetry(_)
            ) || matches!(op, Op::RecordMany(o) if o.iter().any(|o| matches!(o, Outcome::Retry { .. })))
        });
        // Optimistic: the whole group in one transaction. If any request fails, the group is
        // rolled back and each request runs alone, so one bad request fails only itself.
        let ops: Vec<(&Op, Timestamp)> = batch.iter().map(|(op, now, _)| (op, *now)).collect();
        let results: Vec<Result<Reply>> = match self.transaction(&ops) {
            Ok(replies) => replies.into_iter().map(Ok).collect(),
            Err(GroupError::Request(e)) if ops.len() == 1 => vec![Err(e)],
            Err(GroupError::Request(_)) => ops.iter().map(|op| self.alone(*op)).collect(),
            Err(GroupError::Transaction(e)) => ops.iter().map(|_| Err(clone_err(&e))).collect(),
        };
        let committed = results.iter().filter(|r| r.is_ok()).count() as u64;
        if committed > 0 {
            self.committed.store(true, Ordering::Release);
            self.stats.transactions.fetch_add(1, Ordering::Relaxed);
            self.stats.requests.fetch_add(committed, Ordering::Relaxed);
            if wake {
                self.wake.notify_one();
            }
        }
        for ((_, _, reply), res) in batch.into_iter().zip(results) {
            let _ = reply.send(res);
        }
    }

    /// One request in its own transaction.
    fn alone(&self, op: (&Op, Timestamp)) -> Result<Reply> {
        match self.transaction(&[op]) {
            Ok(mut replies) => replies
                .pop()
                .ok_or_else(|| Error::Database("the writer produced no reply".into())),
            Err(GroupError::Request(e) | GroupError::Transaction(e)) => Err(e),
        }
    }

    /// Runs `ops` in one transaction: every reply, or why it was rolled back.
    fn transaction(&self, ops: &[(&Op, Timestamp)]) -> std::result::Result<Vec<Reply>, GroupError> {
        retry_busy(self.lock_timeout, || {
            self.conn.execute_batch("BEGIN IMMEDIATE")
        })
        .map_err(GroupError::Transaction)?;
        let mut replies = Vec::with_capacity(ops.len());
        for (op, now) in ops {
            match apply(&self.conn, &self.sql, op, *now) {
                Ok(r) => replies.push(r),
                Err(e) => {
                    let _ = self.conn.execute_batch("ROLLBACK");
                    return Err(GroupError::Request(e));
                }
            }
        }
        if let Err(e) = retry_busy(self.lock_timeout, || self.conn.execute_batch("COMMIT")) {
            let _ = self.conn.execute_batch("ROLLBACK");
            return Err(GroupError::Transaction(e));
        }
        Ok(replies)
    }
}

/// Why a group transaction did not commit.
enum GroupError {
    /// A request failed (its error): the caller reruns the others one by one.
    Request(Error),
    /// Beginning or committing failed: every request fails with this.
    Transaction(Error),
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

fn record_one(conn: &Connection, sql: &Sql, outcome: &Outcome, now_ms: i64) -> Result<bool> {
    let n = match outcome {
        Outcome::Done { id, delivered } => conn
            .prepare_cached(&sql.record_done)?
            .execute(params![id.to_string(), json_list(delivered), now_ms])?,
        Outcome::Retry {
            id,
            retry_count,
            errors,
            delivered,
            next_attempt_at,
        } => conn.prepare_cached(&sql.record_retry)?.execute(params![
            id.to_string(),
            retry_count,
            json_list(errors),
            json_list(delivered),
            now_ms,
            next_attempt_at.as_millis()
        ])?,
        Outcome::Dead {
            id,
            retry_count,
            errors,
            delivered,
        } => conn.prepare_cached(&sql.record_dead)?.execute(params![
            id.to_string(),
            retry_count,
            json_list(errors),
            json_list(delivered),
            now_ms
        ])?,
    };
    Ok(n == 1)
}

fn apply(conn: &Connection, sql: &Sql, op: &Op, now: Timestamp) -> Result<Reply> {
    let now_ms = now.as_millis();
    Ok(match op {
        Op::Insert(events, mode) => {
            let (status, due) = match mode {
                InsertMode::Pending => ("pending", Some(now_ms)),
                InsertMode::Claimed => ("processing", None),
            };
            let mut stmt = conn.prepare_cached(&sql.insert)?;
            let mut inserted = Vec::with_capacity(events.len());
            for e in events {
                let metadata = if e.metadata.is_empty() {
                    None
                } else {
                    Some(serde_json::to_string(&e.metadata)?)
                };
                let n = stmt.execute(params![
                    e.id.to_string(),
                    e.event_type,
                    e.payload,
                    status,
                    metadata,
                    now_ms,
                    due
                ])?;
                inserted.push(n == 1);
            }
            Reply::Flags(inserted)
        }
        Op::Claim(limit) => {
            // A plain indexed SELECT, then an UPDATE per row by key, in the same write
            // transaction (so atomic).
            let mut select = conn.prepare_cached(&sql.claim_select)?;
            let mut events = select
                .query_map(
                    params![now_ms, i64::try_from(*limit).unwrap_or(i64::MAX)],
                    event_from_row,
                )?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let mut update = conn.prepare_cached(&sql.claim_update)?;
            for e in &mut events {
                update.execute(params![e.id.to_string(), now_ms])?;
                e.status = crate::event::EventStatus::Processing;
                e.updated_at = now;
            }
            Reply::Events(events)
        }
        Op::Record(outcome) => Reply::Flag(record_one(conn, sql, outcome, now_ms)?),
        Op::RecordMany(outcomes) => Reply::Flags(
            outcomes
                .iter()
                .map(|o| record_one(conn, sql, o, now_ms))
                .collect::<Result<_>>()?,
        ),
        Op::Release(ids) => {
            let mut stmt = conn.prepare_cached(&sql.release)?;
            let mut n = 0u64;
            for id in ids {
                n += stmt.execute(params![id.to_string(), now_ms])? as u64;
            }
            Reply::Count(n)
        }
        Op::Recover => {
            let n = conn.execute(&sql.recover, [now_ms])?;
            Reply::Count(n as u64)
        }
        Op::SaveSubscription(row) => {
            if let Some(name) = &row.name {
                conn.execute(&sql.subscription_free_name, params![name, row.id])?;
            }
            conn.execute(
                &sql.subscription_save,
                params![row.id, row.name, row.event_type, row.created_at.as_millis()],
            )?;
            Reply::Unit
        }
        Op::DeleteSubscription(id) => {
            Reply::Flag(conn.execute(&sql.subscription_delete, [id])? == 1)
        }
        Op::DlqRetry(id) => {
            Reply::Flag(conn.execute(&sql.dlq_retry, params![id.to_string(), now_ms])? == 1)
        }
        Op::DlqPurge(cutoff) => {
            Reply::Count(conn.execute(&sql.dlq_purge, [cutoff.as_millis()])? as u64)
        }
        Op::PurgeHistory(cutoff, limit) => Reply::Count(conn.execute(
            &sql.history_purge,
            params![
                cutoff.as_millis(),
                i64::try_from(*limit).unwrap_or(i64::MAX)
            ],
        )? as u64),
    })
}
