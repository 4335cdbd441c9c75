//! Pauses on PostgreSQL (see [`crate::pause`]): the rows, and waking the events a pause parked.
//! Ending a pause locks its row; an attempt that parks an event for it commits before or
//! after, and what it parks after the end is woken by the next refresh of any process.

use async_trait::async_trait;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use super::{PgStore, q, tx};
use crate::actor::{Actor, ActorKind};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::pause::{
    EXPIRY_ACTOR, Pause, PauseEnd, PauseEndKind, PauseRequest, PauseScope, ResumeRequest,
    ResumeTarget, parked_at,
};
use crate::store::PauseStore;

const COLUMNS: &str = "id, scope, target, reason, actor, actor_kind, paused_at, until_at, \
     ended_at, end_kind, ended_by, ended_by_kind, end_reason";

fn kind(r: &PgRow, col: &str) -> Result<ActorKind> {
    let text: String = r.try_get(col)?;
    ActorKind::parse(&text).ok_or_else(|| Error::Internal(format!("unknown actor kind {text:?}")))
}

fn row(r: &PgRow) -> Result<Pause> {
    let (scope, target): (String, String) = (r.try_get("scope")?, r.try_get("target")?);
    let ended = match r.try_get::<Option<i64>, _>("ended_at")? {
        None => None,
        Some(at) => {
            let end: String = r.try_get("end_kind")?;
            Some(PauseEnd {
                kind: PauseEndKind::parse(&end)
                    .ok_or_else(|| Error::Internal(format!("unknown pause end {end:?}")))?,
                at: Timestamp(at),
                actor: Actor::new(
                    r.try_get::<String, _>("ended_by")?,
                    kind(r, "ended_by_kind")?,
                ),
                reason: r.try_get("end_reason")?,
            })
        }
    };
    Ok(Pause {
        id: r.try_get("id")?,
        scope: PauseScope::parse(&scope, &target)
            .ok_or_else(|| Error::Internal(format!("unknown pause scope {scope:?}")))?,
        reason: r.try_get("reason")?,
        actor: Actor::new(r.try_get::<String, _>("actor")?, kind(r, "actor_kind")?),
        paused_at: Timestamp(r.try_get("paused_at")?),
        until: r.try_get::<Option<i64>, _>("until_at")?.map(Timestamp),
        ended,
        parked: 0,
    })
}

impl PgStore {
    /// `template` on this store's schema (`{s}`) with the columns (`{c}`).
    fn pause_sql(&self, template: &str) -> String {
        template
            .replace("{s}", &self.sql.schema)
            .replace("{c}", COLUMNS)
    }

    /// The active pauses, oldest first, then (with `ended_since`) at most `limit` of those
    /// that ended since, newest first.
    async fn pause_rows(
        &self,
        conn: &mut PgConnection,
        ended_since: Option<Timestamp>,
        limit: usize,
    ) -> Result<Vec<Pause>> {
        let mut all =
            q(&self.pause_sql("SELECT {c} FROM {s}.pauses WHERE ended_at IS NULL ORDER BY id"))
                .fetch_all(&mut *conn)
                .await?
                .iter()
                .map(row)
                .collect::<Result<Vec<_>>>()?;
        if let Some(since) = ended_since {
            let ended = q(&self.pause_sql(
                "SELECT {c} FROM {s}.pauses WHERE ended_at >= $1
                 ORDER BY ended_at DESC, id DESC LIMIT $2",
            ))
            .bind(since.as_millis())
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&mut *conn)
            .await?;
            for r in &ended {
                all.push(row(r)?);
            }
        }
        Ok(all)
    }

    /// `pauses` with the events each active one parks.
    async fn pause_counted(
        &self,
        conn: &mut PgConnection,
        mut pauses: Vec<Pause>,
    ) -> Result<Vec<Pause>> {
        let sql = self.pause_sql(
            "SELECT count(*) FROM {s}.events WHERE status = 'pending' AND next_attempt_at = $1",
        );
        for p in &mut pauses {
            if p.ended.is_none() {
                let n: i64 = q(&sql)
                    .bind(parked_at(p.id).as_millis())
                    .fetch_one(&mut *conn)
                    .await?
                    .try_get(0)?;
                p.parked = u64::try_from(n).unwrap_or(0);
            }
        }
        Ok(pauses)
    }

    /// Makes the events the pauses `ids` parked due at `now` and tells every worker if any
    /// became due. Returns how many.
    async fn pause_wake_in(
        &self,
        conn: &mut PgConnection,
        ids: &[i64],
        now: Timestamp,
    ) -> Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        let marks: Vec<i64> = ids.iter().map(|id| parked_at(*id).as_millis()).collect();
        let n = q(&self.pause_sql(
            "UPDATE {s}.events SET next_attempt_at = $2, updated_at = $2
             WHERE status = 'pending' AND next_attempt_at = ANY($1)",
        ))
        .bind(&marks)
        .bind(now.as_millis())
        .execute(&mut *conn)
        .await?
        .rows_affected();
        if n > 0 {
            q("SELECT pg_notify($1, '')")
                .bind(&self.channel)
                .execute(&mut *conn)
                .await?;
        }
        Ok(n)
    }

    /// Ends the active pauses `locked` (their ids and `until`s, their rows locked in `tx`) at
    /// `now`, resumed by `resume` or else expired, and wakes their events.
    async fn pause_end_locked(
        &self,
        tx: &mut PgConnection,
        locked: Vec<(i64, Option<i64>)>,
        resume: Option<&ResumeRequest>,
        now: Timestamp,
    ) -> Result<Vec<Pause>> {
        let mut ended = Vec::new();
        for (id, until) in locked {
            let (kind, at, actor, reason) = match resume {
                Some(req) => (
                    PauseEndKind::Resumed,
                    now,
                    req.actor.clone(),
                    req.reason.clone(),
                ),
                None => (
                    PauseEndKind::Expired,
                    until.map_or(now, Timestamp),
                    Actor::new(EXPIRY_ACTOR, ActorKind::Auto),
                    None,
                ),
            };
            let done = q(&self.pause_sql(
                "UPDATE {s}.pauses SET ended_at = $2, end_kind = $3, ended_by = $4,
                     ended_by_kind = $5, end_reason = $6
                 WHERE id = $1 RETURNING {c}",
            ))
            .bind(id)
            .bind(at.as_millis())
            .bind(kind.as_str())
            .bind(&actor.name)
            .bind(actor.kind.as_str())
            .bind(&reason)
            .fetch_one(&mut *tx)
            .await?;
            ended.push(row(&done)?);
        }
        let ids: Vec<i64> = ended.iter().map(|p| p.id).collect();
        self.pause_wake_in(tx, &ids, now).await?;
        Ok(ended)
    }
}

/// The ids and `until`s of locked pause rows.
fn locked(rows: &[PgRow]) -> Result<Vec<(i64, Option<i64>)>> {
    rows.iter()
        .map(|r| Ok((r.try_get("id")?, r.try_get("until_at")?)))
        .collect()
}

#[async_trait]
impl PauseStore for PgStore {
    async fn pause_create(&self, r: PauseRequest, now: Timestamp) -> Result<Pause> {
        self.noted(async {
            self.check()?;
            let stored = q(&self.pause_sql(
                "INSERT INTO {s}.pauses (scope, target, reason, actor, actor_kind, paused_at, until_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {c}",
            ))
            .bind(r.scope.kind())
            .bind(r.scope.target())
            .bind(&r.reason)
            .bind(&r.actor.name)
            .bind(r.actor.kind.as_str())
            .bind(now.as_millis())
            .bind(r.until.map(Timestamp::as_millis))
            .fetch_one(&mut *self.pool.acquire().await?)
            .await?;
            row(&stored)
        })
        .await
    }

    async fn pause_get(&self, id: i64) -> Result<Option<Pause>> {
        self.noted(async {
            self.check()?;
            let mut conn = self.pool.acquire().await?;
            let found = q(&self.pause_sql("SELECT {c} FROM {s}.pauses WHERE id = $1"))
                .bind(id)
                .fetch_optional(&mut *conn)
                .await?;
            let found = found.as_ref().map(row).transpose()?;
            Ok(self
                .pause_counted(&mut conn, found.into_iter().collect())
                .await?
                .pop())
        })
        .await
    }

    async fn pause_list(&self, ended_since: Option<Timestamp>, limit: usize) -> Result<Vec<Pause>> {
        self.noted(async {
            self.check()?;
            let mut conn = self.pool.acquire().await?;
            let all = self.pause_rows(&mut conn, ended_since, limit).await?;
            self.pause_counted(&mut conn, all).await
        })
        .await
    }

    async fn pause_active(&self, ended_since: Timestamp) -> Result<Vec<Pause>> {
        self.noted(async {
            self.check()?;
            let mut conn = self.pool.acquire().await?;
            self.pause_rows(&mut conn, Some(ended_since), usize::MAX)
                .await
        })
        .await
    }

    async fn pause_end(&self, request: ResumeRequest, now: Timestamp) -> Result<Vec<Pause>> {
        self.noted(async {
            self.check()?;
            let mut tx = tx::begin(&self.pool).await?;
            let rows = match &request.target {
                ResumeTarget::Id(id) => {
                    q(&self.pause_sql(
                        "SELECT id, until_at FROM {s}.pauses
                         WHERE ended_at IS NULL AND id = $1 FOR UPDATE",
                    ))
                    .bind(id)
                    .fetch_all(&mut *tx)
                    .await?
                }
                ResumeTarget::Scope(scope) => {
                    q(&self.pause_sql(
                        "SELECT id, until_at FROM {s}.pauses
                         WHERE ended_at IS NULL AND scope = $1 AND target = $2
                         ORDER BY id FOR UPDATE",
                    ))
                    .bind(scope.kind())
                    .bind(scope.target())
                    .fetch_all(&mut *tx)
                    .await?
                }
            };
            let ended = self
                .pause_end_locked(&mut tx, locked(&rows)?, Some(&request), now)
                .await?;
            tx.commit().await?;
            Ok(ended)
        })
        .await
    }

    async fn pause_expire(&self, now: Timestamp) -> Result<Vec<Pause>> {
        self.noted(async {
            self.check()?;
            let mut tx = tx::begin(&self.pool).await?;
            let rows = q(&self.pause_sql(
                "SELECT id, until_at FROM {s}.pauses
                 WHERE ended_at IS NULL AND until_at <= $1 ORDER BY id FOR UPDATE",
            ))
            .bind(now.as_millis())
            .fetch_all(&mut *tx)
            .await?;
            let ended = self
                .pause_end_locked(&mut tx, locked(&rows)?, None, now)
                .await?;
            tx.commit().await?;
            Ok(ended)
        })
        .await
    }

    async fn pause_wake(&self, ids: Vec<i64>, now: Timestamp) -> Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        self.noted(async {
            self.check()?;
            let mut conn = self.pool.acquire().await?;
            self.pause_wake_in(&mut conn, &ids, now).await
        })
        .await
    }
}
