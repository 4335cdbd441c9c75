//! Printing events as tables or JSON.

use std::io::Write;

use durabus::Event;

/// Writes `args` to standard output. When standard output is closed (the reader of a pipe went
/// away: `durabus events list | head -1`), the program stops quietly with status 0, as the
/// reader has what it wanted; any other failure to write ends it with a one-line error and
/// status 1. Never a panic.
pub fn write_out(args: std::fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("durabus: cannot write to standard output: {e}");
        std::process::exit(1);
    }
}

/// Prints `value` as pretty JSON.
pub fn json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    outln!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

/// Prints events as a table, or a note when there are none.
pub fn events_table(events: &[Event], empty: &str) {
    if events.is_empty() {
        outln!("{empty}");
        return;
    }
    outln!(
        "{:<36}  {:<24}  {:<10}  {:>7}  {:<24}  LAST ERROR",
        "ID",
        "TYPE",
        "STATUS",
        "RETRIES",
        "CREATED"
    );
    for e in events {
        outln!(
            "{:<36}  {:<24}  {:<10}  {:>7}  {:<24}  {}",
            e.id,
            clip(&e.event_type, 24),
            e.status,
            e.retry_count,
            e.created_at,
            clip(e.last_error().unwrap_or("-"), 60)
        );
    }
}

fn ts(t: Option<durabus::Timestamp>) -> String {
    t.map_or_else(|| "-".into(), |t| t.to_string())
}

/// Prints dead-letter records as a table, or a note when there are none.
pub fn dead_letters(items: &[durabus::DeadLetter], empty: &str) {
    if items.is_empty() {
        outln!("{empty}");
        return;
    }
    outln!(
        "{:>8}  {:<36}  {:<24}  {:<9}  {:>5}  {:<16}  {:<24}  LAST ERROR",
        "SEQ",
        "EVENT ID",
        "TYPE",
        "STATUS",
        "RETRY",
        "GROUP",
        "CREATED"
    );
    for d in items {
        outln!(
            "{:>8}  {:<36}  {:<24}  {:<9}  {:>5}  {:<16}  {:<24}  {}",
            d.seq,
            d.event_id,
            clip(&d.event_type, 24),
            d.status,
            d.auto_retry_count + d.manual_retry_count,
            d.fingerprint,
            d.created_at,
            clip(&d.last_error, 60)
        );
    }
}

/// Prints one dead letter in full.
pub fn dead_letter(d: &durabus::DeadLetter) {
    outln!("dead letter    {}", d.event_id);
    outln!("type           {}", d.event_type);
    outln!("status         {}", d.status);
    outln!(
        "subscription   {}",
        d.subscription.as_deref().unwrap_or("-")
    );
    outln!("group          {}", d.fingerprint);
    outln!("last error     {}", d.last_error);
    for c in &d.causes {
        outln!("  caused by    {c}");
    }
    outln!("attempts       {} (last round)", d.attempts);
    outln!(
        "retries        {} auto, {} manual; next auto retry {}",
        d.auto_retry_count,
        d.manual_retry_count,
        ts(d.next_auto_retry_at)
    );
    outln!("created        {}", d.created_at);
    outln!("updated        {}", d.updated_at);
    outln!(
        "last retry     {} by {}",
        ts(d.last_retry_at),
        d.last_retry_by.as_deref().unwrap_or("-")
    );
    outln!(
        "resolved       {} by {} ({})",
        ts(d.resolved_at),
        d.resolved_by.as_deref().unwrap_or("-"),
        d.resolution_note.as_deref().unwrap_or("-")
    );
    outln!("payload        {}", d.payload);
    for round in &d.error_history {
        outln!(
            "round {} failed {}{}",
            round.round,
            round.failed_at,
            round
                .retried_by
                .as_deref()
                .map_or(String::new(), |by| format!(" (retried by {by})"))
        );
        for e in &round.errors {
            outln!("  {e}");
        }
    }
}

/// Prints failure groups.
pub fn groups(groups: &[durabus::DeadLetterGroup]) {
    if groups.is_empty() {
        outln!("no failure groups: the dead-letter queue is empty");
        return;
    }
    outln!(
        "{:<16}  {:>7}  {:>7}  {:<20}  {:<24}  {:<24}  SAMPLE",
        "GROUP",
        "OPEN",
        "TOTAL",
        "SUBSCRIPTION",
        "FIRST SEEN",
        "LAST SEEN"
    );
    for g in groups {
        outln!(
            "{:<16}  {:>7}  {:>7}  {:<20}  {:<24}  {:<24}  {}",
            g.fingerprint,
            g.open,
            g.count,
            clip(g.subscription.as_deref().unwrap_or("-"), 20),
            g.first_seen,
            g.last_seen,
            clip(&g.sample_error, 60)
        );
        outln!("{:<16}  types: {}", "", g.event_types.join(", "));
    }
}

/// Prints operations as a table.
pub fn operations(list: &[durabus::Operation]) {
    if list.is_empty() {
        outln!("no operations");
        return;
    }
    outln!(
        "{:<36}  {:<22}  {:<9}  {:>15}  {:<12}  CREATED",
        "ID",
        "KIND",
        "STATUS",
        "DONE/TOTAL",
        "ACTOR"
    );
    for op in list {
        outln!(
            "{:<36}  {:<22}  {:<9}  {:>15}  {:<12}  {}",
            op.id,
            op.kind,
            op.status,
            format!("{}/{}", op.processed + op.skipped + op.errors, op.total),
            clip(&op.actor.name, 12),
            op.created_at
        );
    }
}

/// Prints one operation in full.
pub fn operation(op: &durabus::Operation) {
    outln!("operation   {}", op.id);
    outln!("kind        {}", op.kind);
    outln!("status      {}", op.status);
    outln!(
        "progress    {} processed, {} skipped, {} errors, of {} selected",
        op.processed,
        op.skipped,
        op.errors,
        op.total
    );
    outln!("actor       {} ({})", op.actor.name, op.actor.kind.as_str());
    outln!("created     {}", op.created_at);
    outln!("started     {}", ts(op.started_at));
    outln!("finished    {}", ts(op.finished_at));
    outln!(
        "duration    {} ms",
        op.duration_ms(durabus::Timestamp::now())
    );
    outln!("selection   {}", op.params);
    if let Some(summary) = &op.summary {
        outln!("summary     {summary}");
    }
    if op.cancel_requested && !op.status.is_finished() {
        outln!("cancel      asked for; it stops after its current chunk");
    }
    if let Some(e) = &op.last_error {
        outln!("error       {e}");
    }
}

/// Prints event counts per type.
pub fn type_counts(counts: &std::collections::BTreeMap<String, u64>) {
    for (t, n) in counts {
        outln!("  {n:>10}  {t}");
    }
}

/// Prints a few events (samples) as a table.
pub fn event_list(events: &[Event]) {
    events_table(events, "  (none)");
}

/// Prints the scheduled jobs.
pub fn jobs(jobs: &[durabus::scheduler::JobInfo]) {
    outln!(
        "{:<24}  {:<14}  {:<8}  {:<24}  {:<24}  LAST",
        "JOB",
        "SCHEDULE",
        "ENABLED",
        "NEXT RUN",
        "LAST RUN"
    );
    for j in jobs {
        let last = j.last.as_ref();
        outln!(
            "{:<24}  {:<14}  {:<8}  {:<24}  {:<24}  {}",
            j.name,
            j.schedule,
            j.enabled,
            ts(j.next_run),
            ts(last.and_then(|l| l.last_started_at)),
            last.map_or("never ran".into(), |l| format!(
                "{}: {}",
                l.last_status.as_deref().unwrap_or("running"),
                l.last_message.as_deref().unwrap_or("")
            ))
        );
    }
}

/// Prints payload snapshots.
pub fn snapshots(list: &[durabus::Snapshot]) {
    if list.is_empty() {
        outln!("no payload snapshots");
        return;
    }
    outln!(
        "{:<16}  {:<24}  {:>9}  {:>10}  {:<5}  {:<6}  PAYLOAD",
        "STAGE",
        "TAKEN",
        "BYTES",
        "COMPRESSED",
        "MEDIA",
        "BASE64"
    );
    for s in list {
        let shown = match (&s.payload, &s.deleted) {
            (Some(p), _) => clip(p, 60),
            (None, Some(d)) => {
                format!("deleted {} by {}: {}", d.deleted_at, d.deleted_by, d.reason)
            }
            (None, None) => "-".into(),
        };
        outln!(
            "{:<16}  {:<24}  {:>9}  {:>10}  {:<5}  {:<6}  {}",
            clip(&s.stage, 16),
            s.created_at,
            s.size_original,
            s.size_compressed,
            s.contains_media,
            s.contains_base64,
            shown
        );
    }
}

/// Prints payload configuration rows.
pub fn payload_configs(rows: &[durabus::PayloadConfig]) {
    if rows.is_empty() {
        outln!("no payload configuration: every stage is stored for 14 days, nothing redacted");
        return;
    }
    outln!(
        "{:<28}  {:<24}  {:>5}  {:<30}  {:<6}  UPDATED",
        "EVENT TYPE",
        "STAGES",
        "DAYS",
        "REDACT",
        "BEFORE"
    );
    for c in rows {
        outln!(
            "{:<28}  {:<24}  {:>5}  {:<30}  {:<6}  {} by {}",
            clip(&c.event_type, 28),
            clip(&c.stages.join(","), 24),
            c.retention_days,
            clip(&c.redact.join(" "), 30),
            c.redact_before_store,
            c.updated_at,
            c.updated_by
        );
    }
}
