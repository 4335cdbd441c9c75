//! Pauses on SQLite (see [`crate::pause`]): the rows, and waking the events a pause parked.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::SqliteStore;
use super::op::WriteOp;
use super::rows::corrupt;
use super::sql::Sql;
use crate::actor::{Actor, ActorKind};
use crate::clock::Timestamp;
use crate::error::Result;
use crate::pause::{
    Pause, PauseEnd, PauseEndKind, PauseRequest, PauseScope, ResumeRequest, ResumeTarget, parked_at,
};
use crate::store::PauseStore;

const COLUMNS: &str = "id, scope, target, reason, actor, actor_kind, paused_at, until_at, \
     ended_at, end_kind, ended_by, ended_by_kind, end_reason";

/// `template` on this store's tables (`{p}` is the prefix, `{c}` the columns).
fn stmt(sql: &Sql, template: &str) -> String {
    template.replace("{p}", &sql.prefix).replace("{c}", COLUMNS)
}

fn kind(r: &Row<'_>, col: usize) -> rusqlite::Result<ActorKind> {
    let text: String = r.get(col)?;
    ActorKind::parse(&text).ok_or_else(|| corrupt(col, format!("unknown actor kind {text:?}")))
}

fn row(r: &Row<'_>) -> rusqlite::Result<Pause> {
    let (scope, target): (String, String) = (r.get(1)?, r.get(2)?);
    let ended = match r.get::<_, Option<i64>>(8)? {
        None => None,
        Some(at) => {
            let end: String = r.get(9)?;
            Some(PauseEnd {
                kind: PauseEndKind::parse(&end)
                    .ok_or_else(|| corrupt(9, format!("unknown pause end {end:?}")))?,
                at: Timestamp(at),
                actor: Actor::new(r.get::<_, String>(10)?, kind(r, 11)?),
                reason: r.get(12)?,
            })
        }
    };
    Ok(Pause {
        id: r.get(0)?,
        scope: PauseScope::parse(&scope, &target)
            .ok_or_else(|| corrupt(1, format!("unknown pause scope {scope:?}")))?,
        reason: r.get(3)?,
        actor: Actor::new(r.get::<_, String>(4)?, kind(r, 5)?),
        paused_at: Timestamp(r.get(6)?),
        until: r.get::<_, Option<i64>>(7)?.map(Timestamp),
        ended,
        parked: 0,
    })
}

/// The events pause `id` parks now.
fn parked(conn: &Connection, sql: &Sql, id: i64) -> rusqlite::Result<u64> {
    conn.prepare_cached(&stmt(
        sql,
        "SELECT count(*) FROM {p}events INDEXED BY {p}events_due
         WHERE status = 'pending' AND next_attempt_at = ?1",
    ))?
    .query_row([parked_at(id).as_millis()], |r| r.get(0))
}

/// `pauses` with the events each active one parks.
fn counted(conn: &Connection, sql: &Sql, mut pauses: Vec<Pause>) -> rusqlite::Result<Vec<Pause>> {
    for p in &mut pauses {
        if p.ended.is_none() {
            p.parked = parked(conn, sql, p.id)?;
        }
    }
    Ok(pauses)
}

fn get(conn: &Connection, sql: &Sql, id: i64) -> rusqlite::Result<Option<Pause>> {
    conn.prepare_cached(&stmt(sql, "SELECT {c} FROM {p}pauses WHERE id = ?1"))?
        .query_row([id], row)
        .optional()
}

/// Makes the events pause `id` parked due at `now` (those with a priority in their lane too).
/// Returns how many.
fn wake(conn: &Connection, sql: &Sql, id: i64, now: Timestamp) -> Result<u64> {
    let (mark, now) = (parked_at(id).as_millis(), now.as_millis());
    conn.prepare_cached(&stmt(
        sql,
        "UPDATE {p}waiting SET due = ?2 WHERE lane = 2 AND event_id IN
             (SELECT id FROM {p}events INDEXED BY {p}events_due
              WHERE status = 'pending' AND next_attempt_at = ?1)",
    ))?
    .execute(params![mark, now])?;
    let n = conn
        .prepare_cached(&stmt(
            sql,
            "UPDATE {p}events SET next_attempt_at = ?2, updated_at = ?2
             WHERE status = 'pending' AND next_attempt_at = ?1",
        ))?
        .execute(params![mark, now])?;
    Ok(n as u64)
}

/// Ends pause `id` at `at` (`kind`, by `actor`, for `reason`) and wakes its events at `now`;
/// returns it as ended, or `None` if it was not active.
fn end(
    conn: &Connection,
    sql: &Sql,
    id: i64,
    (kind, at, actor, reason): (PauseEndKind, Timestamp, &Actor, Option<&str>),
    now: Timestamp,
) -> Result<Option<Pause>> {
    let n = conn
        .prepare_cached(&stmt(
            sql,
            "UPDATE {p}pauses SET ended_at = ?2, end_kind = ?3, ended_by = ?4, ended_by_kind = ?5,
                 end_reason = ?6
             WHERE id = ?1 AND ended_at IS NULL",
        ))?
        .execute(params![
            id,
            at.as_millis(),
            kind.as_str(),
            actor.name,
            actor.kind.as_str(),
            reason
        ])?;
    if n == 0 {
        return Ok(None);
    }
    wake(conn, sql, id, now)?;
    Ok(get(conn, sql, id)?)
}

/// The active pauses, oldest first, then (with `ended_since`) at most `limit` of those that
/// ended since, newest first.
fn list(
    c: &Connection,
    sql: &Sql,
    ended_since: Option<Timestamp>,
    limit: usize,
) -> rusqlite::Result<Vec<Pause>> {
    let mut all: Vec<Pause> = c
        .prepare_cached(&stmt(
            sql,
            "SELECT {c} FROM {p}pauses INDEXED BY {p}pauses_active
             WHERE ended_at IS NULL ORDER BY id",
        ))?
        .query_map([], row)?
        .collect::<rusqlite::Result<_>>()?;
    if let Some(since) = ended_since {
        let ended = c
            .prepare_cached(&stmt(
                sql,
                "SELECT {c} FROM {p}pauses INDEXED BY {p}pauses_ended
                 WHERE ended_at >= ?1 ORDER BY ended_at DESC, id DESC LIMIT ?2",
            ))?
            .query_map(
                params![since.as_millis(), i64::try_from(limit).unwrap_or(i64::MAX)],
                row,
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        all.extend(ended);
    }
    Ok(all)
}

struct Create(PauseRequest);

impl WriteOp for Create {
    type Reply = Pause;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<Pause> {
        let r = &self.0;
        let id: i64 = conn
            .prepare_cached(&stmt(
                sql,
                "INSERT INTO {p}pauses (scope, target, reason, actor, actor_kind, paused_at, until_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) RETURNING id",
            ))?
            .query_row(
                params![
                    r.scope.kind(),
                    r.scope.target(),
                    r.reason,
                    r.actor.name,
                    r.actor.kind.as_str(),
                    now.as_millis(),
                    r.until.map(Timestamp::as_millis)
                ],
                |row| row.get(0),
            )?;
        get(conn, sql, id)?.ok_or_else(|| crate::error::Error::NotFound {
            what: format!("pause {id}"),
        })
    }
}

/// Ends pauses and wakes what they parked: by a resume, or (with no request) those expired.
struct End(Option<ResumeRequest>);

impl WriteOp for End {
    type Reply = Vec<Pause>;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<Vec<Pause>> {
        let (ids, how): (Vec<(i64, Option<i64>)>, _) = match &self.0 {
            Some(r) => {
                let ids = match &r.target {
                    ResumeTarget::Id(id) => vec![(*id, None)],
                    ResumeTarget::Scope(s) => conn
                        .prepare_cached(&stmt(
                            sql,
                            "SELECT id FROM {p}pauses INDEXED BY {p}pauses_active
                             WHERE ended_at IS NULL AND scope = ?1 AND target = ?2 ORDER BY id",
                        ))?
                        .query_map(params![s.kind(), s.target()], |r| Ok((r.get(0)?, None)))?
                        .collect::<rusqlite::Result<_>>()?,
                };
                (ids, Some(r))
            }
            None => {
                let ids = conn
                    .prepare_cached(&stmt(
                        sql,
                        "SELECT id, until_at FROM {p}pauses INDEXED BY {p}pauses_active
                         WHERE ended_at IS NULL AND until_at <= ?1 ORDER BY id",
                    ))?
                    .query_map([now.as_millis()], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<rusqlite::Result<_>>()?;
                (ids, None)
            }
        };
        let auto = Actor::new(crate::pause::EXPIRY_ACTOR, ActorKind::Auto);
        let mut ended = Vec::new();
        for (id, until) in ids {
            let how = match how {
                Some(r) => (PauseEndKind::Resumed, now, &r.actor, r.reason.as_deref()),
                None => (
                    PauseEndKind::Expired,
                    until.map_or(now, Timestamp),
                    &auto,
                    None,
                ),
            };
            if let Some(p) = end(conn, sql, id, how, now)? {
                ended.push(p);
            }
        }
        Ok(ended)
    }

    fn wakes(&self, ended: &Vec<Pause>) -> bool {
        !ended.is_empty()
    }
}

struct Wake(Vec<i64>);

impl WriteOp for Wake {
    type Reply = u64;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<u64> {
        let mut n = 0;
        for id in &self.0 {
            n += wake(conn, sql, *id, now)?;
        }
        Ok(n)
    }

    fn wakes(&self, n: &u64) -> bool {
        *n > 0
    }
}

#[async_trait]
impl PauseStore for SqliteStore {
    async fn pause_create(&self, request: PauseRequest, now: Timestamp) -> Result<Pause> {
        self.write(Create(request), now).await
    }

    async fn pause_get(&self, id: i64) -> Result<Option<Pause>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            let p = get(c, &sql, id)?;
            Ok(counted(c, &sql, p.into_iter().collect())?.pop())
        })
        .await
    }

    async fn pause_list(&self, ended_since: Option<Timestamp>, limit: usize) -> Result<Vec<Pause>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            let all = list(c, &sql, ended_since, limit)?;
            counted(c, &sql, all)
        })
        .await
    }

    async fn pause_active(&self, ended_since: Timestamp) -> Result<Vec<Pause>> {
        let sql = self.sql.clone();
        self.read(move |c| list(c, &sql, Some(ended_since), usize::MAX))
            .await
    }

    async fn pause_end(&self, request: ResumeRequest, now: Timestamp) -> Result<Vec<Pause>> {
        self.write(End(Some(request)), now).await
    }

    async fn pause_expire(&self, now: Timestamp) -> Result<Vec<Pause>> {
        self.write(End(None), now).await
    }

    async fn pause_wake(&self, ids: Vec<i64>, now: Timestamp) -> Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        // Most refreshes find nothing parked: a read answers them without a write.
        let sql = self.sql.clone();
        let probe = ids.clone();
        let any = self
            .read(move |c| {
                for id in probe {
                    if parked(c, &sql, id)? > 0 {
                        return Ok(true);
                    }
                }
                Ok(false)
            })
            .await?;
        if !any {
            return Ok(0);
        }
        self.write(Wake(ids), now).await
    }
}
