//! Typed writes. Each write the SQLite store makes is a [`WriteOp`]: it knows its reply type and
//! whether a committed reply may have made events due (which wakes the dispatcher). Ops are
//! defined beside the capability they belong to (`events.rs`, `subscriptions.rs`, ...); the
//! writer thread runs them without knowing any of them.

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::sql::Sql;
use crate::clock::Timestamp;
use crate::error::{Error, Result};

/// A write the writer thread performs inside its transaction.
pub(crate) trait WriteOp: Send + 'static {
    /// What the write returns.
    type Reply: Send + 'static;

    /// Runs the write on `conn`, inside the writer's open transaction. It may run twice: when
    /// a group transaction fails, each of its requests runs again alone.
    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<Self::Reply>;

    /// Whether this committed reply may have made events due, so the dispatcher must look.
    fn wakes(&self, reply: &Self::Reply) -> bool {
        let _ = reply;
        false
    }

    /// Runs on the writer's thread once the transaction that ran this op has committed, before
    /// the dispatcher is woken and the caller answered: what must be in place when they look
    /// (events a completion claimed for the next claim).
    fn committed(&self, reply: &mut Self::Reply) {
        let _ = reply;
    }
}

/// A request on the writer's channel: an op, the time it runs at, and where its reply goes,
/// with the op's type erased.
pub(super) trait Job: Send {
    /// Runs the op, keeping its reply.
    fn run(&mut self, conn: &Connection, sql: &Sql) -> Result<()>;
    /// Whether the kept reply wakes the dispatcher.
    fn wakes(&self) -> bool;
    /// The op's transaction committed (see [`WriteOp::committed`]).
    fn committed(&mut self);
    /// Answers the caller: the kept reply if `result` is `Ok`, else the error.
    fn answer(self: Box<Self>, result: Result<()>);
}

/// A typed request.
pub(super) struct Request<O: WriteOp> {
    pub op: O,
    pub now: Timestamp,
    pub reply: Option<O::Reply>,
    pub tx: oneshot::Sender<Result<O::Reply>>,
}

impl<O: WriteOp> Job for Request<O> {
    fn run(&mut self, conn: &Connection, sql: &Sql) -> Result<()> {
        self.reply = Some(self.op.apply(conn, sql, self.now)?);
        Ok(())
    }

    fn wakes(&self) -> bool {
        self.reply.as_ref().is_some_and(|r| self.op.wakes(r))
    }

    fn committed(&mut self) {
        if let Some(reply) = self.reply.as_mut() {
            self.op.committed(reply);
        }
    }

    fn answer(self: Box<Self>, result: Result<()>) {
        let Request { reply, tx, .. } = *self;
        let out = result.and_then(|()| {
            reply.ok_or_else(|| Error::Internal("the SQLite writer produced no reply".into()))
        });
        // The caller may have gone (its future dropped); the write stands either way.
        let _ = tx.send(out);
    }
}
