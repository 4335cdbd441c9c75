//! `durabus pause`, `durabus resume`, `durabus pauses`: stop delivering to a subscription,
//! every subscription matching a pattern, or the whole bus, across every worker process on
//! the database, and start again.

use std::time::Duration;

use clap::{ArgGroup, Args as ClapArgs};
use durabus::{
    Pause, PauseRequest, PauseScope, Pauses, ResumeRequest, ResumeTarget, Store, Timestamp,
};

use crate::output;
use crate::table::{Table, number, text};

/// What a pause or a resume names.
#[derive(Debug, ClapArgs)]
pub struct Scope {
    /// The subscription with this name (or, for an unnamed one, this id).
    #[arg(long)]
    subscription: Option<String>,
    /// Every subscription whose name matches this pattern (`*` matches any run of
    /// characters: `payments-*`).
    #[arg(long)]
    matching: Option<String>,
    /// The whole bus: no worker process claims events.
    #[arg(long)]
    bus: bool,
}

impl Scope {
    fn get(self) -> Option<PauseScope> {
        match (self.subscription, self.matching, self.bus) {
            (Some(s), None, false) => Some(PauseScope::Subscription(s)),
            (None, Some(m), false) => Some(PauseScope::Matching(m)),
            (None, None, true) => Some(PauseScope::Bus),
            _ => None,
        }
    }
}

/// `durabus pause`.
#[derive(Debug, ClapArgs)]
#[command(group(ArgGroup::new("what").required(true).args(["subscription", "matching", "bus"])))]
pub struct PauseArgs {
    #[command(flatten)]
    scope: Scope,
    /// Why (required; recorded with the pause).
    #[arg(long)]
    reason: String,
    /// Resume by itself after this long: a whole number of s, m, h or d (90s, 15m, 2h).
    #[arg(long = "for", value_parser = parse_duration, conflicts_with = "until", allow_hyphen_values = true)]
    duration: Option<Duration>,
    /// Resume by itself at this time (RFC 3339).
    #[arg(long)]
    until: Option<Timestamp>,
}

/// `durabus resume`.
#[derive(Debug, ClapArgs)]
#[command(group(ArgGroup::new("what").required(true).args(["id", "subscription", "matching", "bus"])))]
pub struct ResumeArgs {
    /// The pause's id (`durabus pauses` lists them); or name its scope instead.
    id: Option<i64>,
    #[command(flatten)]
    scope: Scope,
    /// Why (optional; recorded with the resume).
    #[arg(long)]
    reason: Option<String>,
}

/// `durabus pauses`.
#[derive(Debug, ClapArgs)]
pub struct ListArgs {
    /// Also the pauses that ended within this long (24h, 7d).
    #[arg(long, value_parser = parse_duration)]
    ended_within: Option<Duration>,
    /// At most this many ended pauses.
    #[arg(long, default_value_t = 50)]
    limit: usize,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    durabus::options::parse_delay("duration", text).map_err(|e| e.to_string())
}

/// Runs `durabus pause`.
pub async fn pause(
    db: &crate::cmd::Db,
    ctx: &super::Context,
    args: PauseArgs,
) -> anyhow::Result<()> {
    let scope = args
        .scope
        .get()
        .ok_or_else(|| anyhow::anyhow!("name one of --subscription, --matching or --bus"))?;
    let until = match (args.duration, args.until) {
        (Some(d), _) => Some(Timestamp::now().plus(d)),
        (None, until) => until,
    };
    let request = PauseRequest {
        scope,
        until,
        actor: ctx.actor.clone(),
        reason: args.reason,
    };
    with_pauses(db, |pauses| async move {
        let p = pauses.pause(request).await?;
        if ctx.json {
            return output::json(&p);
        }
        outln!(
            "pause {}: {} paused{}; every worker process stops running its handlers within its refresh (500 ms by default)",
            p.id,
            p.scope,
            p.until
                .map_or_else(String::new, |u| format!(" until {u}"))
        );
        outln!("resume it with: durabus resume {}", p.id);
        Ok(())
    })
    .await
}

/// Runs `durabus resume`.
pub async fn resume(
    db: &crate::cmd::Db,
    ctx: &super::Context,
    args: ResumeArgs,
) -> anyhow::Result<()> {
    let target = match (args.id, args.scope.get()) {
        (Some(id), None) => ResumeTarget::Id(id),
        (None, Some(scope)) => ResumeTarget::Scope(scope),
        _ => anyhow::bail!("name a pause's id, or one of --subscription, --matching or --bus"),
    };
    let request = ResumeRequest {
        target,
        actor: ctx.actor.clone(),
        reason: args.reason,
    };
    with_pauses(db, |pauses| async move {
        let ended = pauses.resume(request).await?;
        if ctx.json {
            return output::json(&ended);
        }
        for p in &ended {
            outln!(
                "pause {}: {} resumed; its parked events are due now",
                p.id,
                p.scope
            );
        }
        Ok(())
    })
    .await
}

/// Runs `durabus pauses`.
pub async fn list(db: &crate::cmd::Db, ctx: &super::Context, args: ListArgs) -> anyhow::Result<()> {
    let since = args.ended_within.map(|d| Timestamp::now().minus(d));
    with_pauses(db, |pauses| async move {
        let list = pauses.list(since, args.limit).await?;
        if ctx.json {
            return output::json(&list);
        }
        table(&list);
        Ok(())
    })
    .await
}

/// Runs `f` on the pauses of the database, then closes it.
async fn with_pauses<F, Fut>(db: &crate::cmd::Db, f: F) -> anyhow::Result<()>
where
    F: FnOnce(Pauses) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let store: std::sync::Arc<dyn Store> = super::open_existing(db).await?;
    let result = f(Pauses::new(store.clone())).await;
    store.close().await?;
    result
}

/// Prints pauses as a table.
fn table(list: &[Pause]) {
    if list.is_empty() {
        outln!("nothing is paused");
        return;
    }
    let mut t = Table::new(&[
        number("ID"),
        text("SCOPE", 12),
        text("TARGET", 24),
        text("STATE", 8),
        number("PARKED"),
        text("SINCE", 24),
        text("UNTIL / ENDED", 24),
        text("BY", 12),
        text("REASON", 40),
    ]);
    for p in list {
        let state = p.ended.as_ref().map_or("active", |e| e.kind.as_str());
        t.row(vec![
            p.id.to_string(),
            p.scope.kind().to_owned(),
            p.scope.target().to_owned(),
            state.to_owned(),
            p.parked.to_string(),
            p.paused_at.to_string(),
            output::ts(p.ended.as_ref().map(|e| e.at).or(p.until)),
            p.actor.name.clone(),
            p.reason.clone(),
        ]);
    }
    t.print();
}
