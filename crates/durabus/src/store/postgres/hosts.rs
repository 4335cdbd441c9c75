//! Multi-host URLs: a list of servers, as libpq takes them
//! (`postgres://user@host1:5432,host2:5432/db?target_session_attrs=read-write`), of which the
//! store uses the first that suits, and follows the primary when a standby is promoted.
//!
//! sqlx connects to one host. The store finds the suitable server itself, in the URL's order,
//! and points its pool at it. While the store is open, a probe connection asks that server
//! every [`PROBE_EVERY`] whether it still suits; when it does not (it died, or it was demoted
//! to a standby), the list is searched again and the pool is pointed at the server found:
//! connections opened from then on go there, and every pooled connection opened before the
//! move is closed instead of being handed out. `LISTEN` reconnects through the pool, so it
//! follows too. Writes that were in flight when the old primary died fail, and are not
//! acknowledged.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool};

/// How often the probe asks the server in use whether it still suits.
pub(crate) const PROBE_EVERY: Duration = Duration::from_millis(250);

/// How long connecting to one server of the list (or one probe) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Which server will do (`target_session_attrs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Need {
    /// Any server that accepts a connection (`any`, the default).
    Any,
    /// One that accepts writes (`read-write`): `transaction_read_only` is off.
    ReadWrite,
    /// One that is not a standby (`primary`): not in recovery.
    Primary,
}

/// The servers of a URL, in its order.
#[derive(Debug, Clone)]
pub(super) struct Hosts {
    /// Each server's connect options (the URL's user, database and parameters).
    pub(super) candidates: Vec<PgConnectOptions>,
    /// Each server as `host:port`, for messages.
    pub(super) names: Vec<String>,
    /// Which will do.
    pub(super) need: Need,
}

/// Reads a multi-host URL; `Ok(None)` for a URL of one host without `target_session_attrs`
/// (sqlx reads those itself). `Err` says what is wrong.
pub(super) fn parse(url: &str) -> Result<Option<Hosts>, String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(None);
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (user, list) = match authority.rsplit_once('@') {
        Some((u, l)) => (Some(u), l),
        None => (None, authority),
    };
    let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
    let mut need = None;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("target_session_attrs", v)) => {
                need = Some(match v {
                    "any" => Need::Any,
                    "read-write" => Need::ReadWrite,
                    "primary" => Need::Primary,
                    other => {
                        return Err(format!(
                            "target_session_attrs={other} (durabus takes any, read-write or primary)"
                        ));
                    }
                })
            }
            _ => kept.push(pair),
        }
    }
    if !list.contains(',') && need.is_none() {
        return Ok(None);
    }
    let mut hosts = Vec::new();
    for entry in list.split(',') {
        let (host, port) = split_port(entry)?;
        hosts.push((host, port));
    }
    let first = hosts.first().map(|(h, _)| h.clone()).unwrap_or_default();
    let base = format!(
        "{scheme}://{}{first}{path}{}{}",
        user.map(|u| format!("{u}@")).unwrap_or_default(),
        if kept.is_empty() { "" } else { "?" },
        kept.join("&")
    );
    let base: PgConnectOptions = base.parse().map_err(|e: sqlx::Error| e.to_string())?;
    Ok(Some(Hosts {
        candidates: hosts
            .iter()
            .map(|(h, p)| base.clone().host(h).port(*p))
            .collect(),
        names: hosts.iter().map(|(h, p)| format!("{h}:{p}")).collect(),
        need: need.unwrap_or(Need::Any),
    }))
}

/// `host[:port]` or `[v6]:port`; the port defaults to 5432.
fn split_port(entry: &str) -> Result<(String, u16), String> {
    let bad = || format!("{entry:?} is not host or host:port");
    let (host, port) = match entry.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']').ok_or_else(bad)?;
            (host, after.strip_prefix(':'))
        }
        None => match entry.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (entry, None),
        },
    };
    if host.is_empty() {
        return Err(bad());
    }
    let port = match port {
        Some(p) => p.parse().map_err(|_| bad())?,
        None => 5432,
    };
    Ok((host.to_owned(), port))
}

/// Whether the server on `conn` suits `need`.
pub(super) async fn suits(conn: &mut PgConnection, need: Need) -> Result<bool, sqlx::Error> {
    let sql = match need {
        Need::Any => return Ok(true),
        Need::ReadWrite => "SELECT current_setting('transaction_read_only') = 'off'",
        Need::Primary => "SELECT NOT pg_is_in_recovery()",
    };
    sqlx::query_scalar::<_, bool>(sql).fetch_one(conn).await
}

impl Hosts {
    /// The first server of the list that suits, with a connection to it; or why none does.
    pub(super) async fn find(&self) -> Result<(usize, PgConnection), String> {
        let mut why = Vec::new();
        for (i, options) in self.candidates.iter().enumerate() {
            let name = &self.names[i];
            let tried = tokio::time::timeout(CONNECT_TIMEOUT, async {
                let mut conn = PgConnection::connect_with(options).await?;
                let ok = suits(&mut conn, self.need).await?;
                Ok::<_, sqlx::Error>((conn, ok))
            })
            .await;
            match tried {
                Ok(Ok((conn, true))) => return Ok((i, conn)),
                Ok(Ok((conn, false))) => {
                    let _ = conn.close().await;
                    why.push(format!("{name}: read-only (a standby?)"));
                }
                Ok(Err(e)) => why.push(format!("{name}: {e}")),
                Err(_) => why.push(format!("{name}: no answer within {CONNECT_TIMEOUT:?}")),
            }
        }
        Err(format!("no server of the URL will do: {}", why.join("; ")))
    }
}

/// When the pool was last pointed at another server: connections opened before are closed
/// instead of being handed out.
#[derive(Debug)]
pub(super) struct Moved {
    base: Instant,
    /// µs since `base` (0: never moved).
    at_us: AtomicU64,
}

impl Default for Moved {
    fn default() -> Self {
        Moved {
            base: Instant::now(),
            at_us: AtomicU64::new(0),
        }
    }
}

impl Moved {
    fn mark(&self) {
        let us = u64::try_from(self.base.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.at_us.store(us.max(1), Ordering::Release);
    }

    /// Whether a connection of this age was opened before the last move.
    pub(super) fn predates(&self, age: Duration) -> bool {
        let at = self.at_us.load(Ordering::Acquire);
        at != 0
            && age
                > self
                    .base
                    .elapsed()
                    .saturating_sub(Duration::from_micros(at))
    }
}

/// Keeps the pool on a suitable server until the pool closes (see the module's text).
pub(super) async fn follow(
    pool: PgPool,
    hosts: Hosts,
    mut current: usize,
    probe: PgConnection,
    moved: Arc<Moved>,
) {
    let mut probe = Some(probe);
    let mut told = false;
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        if pool.is_closed() {
            return;
        }
        if let Some(conn) = probe.as_mut() {
            let asked = tokio::time::timeout(CONNECT_TIMEOUT, suits(conn, hosts.need)).await;
            if matches!(asked, Ok(Ok(true))) {
                continue;
            }
        }
        if let Some(conn) = probe.take() {
            drop(tokio::time::timeout(CONNECT_TIMEOUT, conn.close()).await);
        }
        match hosts.find().await {
            Ok((found, conn)) => {
                if found != current {
                    tracing::warn!(
                        from = %hosts.names[current],
                        to = %hosts.names[found],
                        "the PostgreSQL server in use no longer suits (it went down, or it is a standby now): the store moves to the next that does"
                    );
                    pool.set_connect_options(hosts.candidates[found].clone());
                    moved.mark();
                    super::liveness::connection_lost();
                    current = found;
                } else if told {
                    tracing::info!(server = %hosts.names[found], "the PostgreSQL server suits again");
                }
                told = false;
                probe = Some(conn);
            }
            Err(why) => {
                if !told {
                    tracing::warn!("{why}; searching again every {PROBE_EVERY:?}");
                    told = true;
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn one_host_is_left_to_sqlx() {
        assert!(
            parse("postgres://u@h:5433/db?sslmode=disable")
                .unwrap()
                .is_none()
        );
        assert!(parse("not a url").unwrap().is_none());
    }

    #[test]
    fn a_list_keeps_its_order_ports_and_parameters() {
        let hosts = parse(
            "postgres://u:pw@a:5433,b,[::1]:6000/db?application_name=x&target_session_attrs=read-write",
        )
        .unwrap()
        .unwrap();
        assert_eq!(hosts.names, ["a:5433", "b:5432", "::1:6000"]);
        assert_eq!(hosts.need, Need::ReadWrite);
        assert_eq!(hosts.candidates[1].get_host(), "b");
        assert_eq!(hosts.candidates[2].get_port(), 6000);
        assert_eq!(hosts.candidates[0].get_database(), Some("db"));
        assert_eq!(hosts.candidates[0].get_username(), "u");
    }

    #[test]
    fn one_host_with_session_attrs_is_read_here() {
        let hosts = parse("postgres://u@h/db?target_session_attrs=primary")
            .unwrap()
            .unwrap();
        assert_eq!(hosts.need, Need::Primary);
        assert_eq!(hosts.names, ["h:5432"]);
    }

    #[test]
    fn bad_lists_say_what_is_wrong() {
        let e = parse("postgres://u@a,b:x/db").unwrap_err();
        assert!(e.contains("\"b:x\""), "{e}");
        let e = parse("postgres://u@a,/db").unwrap_err();
        assert!(e.contains("host or host:port"), "{e}");
        let e = parse("postgres://u@a,b/db?target_session_attrs=standby").unwrap_err();
        assert!(e.contains("read-write"), "{e}");
    }

    #[test]
    fn a_connection_older_than_the_move_is_stale() {
        let moved = Moved::default();
        assert!(!moved.predates(Duration::from_secs(3600)));
        moved.mark();
        assert!(moved.predates(Duration::from_millis(2)));
        assert!(!moved.predates(Duration::ZERO));
    }
}
