//! Printing events as tables or JSON.

use durabus::Event;

/// Prints `value` as pretty JSON.
pub fn json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
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
        println!("{empty}");
        return;
    }
    println!(
        "{:<36}  {:<24}  {:<10}  {:>7}  {:<24}  LAST ERROR",
        "ID", "TYPE", "STATUS", "RETRIES", "CREATED"
    );
    for e in events {
        println!(
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
        println!("{empty}");
        return;
    }
    println!(
        "{:>8}  {:<36}  {:<24}  {:<9}  {:>5}  {:<16}  {:<24}  LAST ERROR",
        "SEQ", "EVENT ID", "TYPE", "STATUS", "RETRY", "GROUP", "CREATED"
    );
    for d in items {
        println!(
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
    println!("dead letter    {}", d.event_id);
    println!("type           {}", d.event_type);
    println!("status         {}", d.status);
    println!(
        "subscription   {}",
        d.subscription.as_deref().unwrap_or("-")
    );
    println!("group          {}", d.fingerprint);
    println!("last error     {}", d.last_error);
    for c in &d.causes {
        println!("  caused by    {c}");
    }
    println!("attempts       {} (last round)", d.attempts);
    println!(
        "retries        {} auto, {} manual; next auto retry {}",
        d.auto_retry_count,
        d.manual_retry_count,
        ts(d.next_auto_retry_at)
    );
    println!("created        {}", d.created_at);
    println!("updated        {}", d.updated_at);
    println!(
        "last retry     {} by {}",
        ts(d.last_retry_at),
        d.last_retry_by.as_deref().unwrap_or("-")
    );
    println!(
        "resolved       {} by {} ({})",
        ts(d.resolved_at),
        d.resolved_by.as_deref().unwrap_or("-"),
        d.resolution_note.as_deref().unwrap_or("-")
    );
    println!("payload        {}", d.payload);
    for round in &d.error_history {
        println!(
            "round {} failed {}{}",
            round.round,
            round.failed_at,
            round
                .retried_by
                .as_deref()
                .map_or(String::new(), |by| format!(" (retried by {by})"))
        );
        for e in &round.errors {
            println!("  {e}");
        }
    }
}

/// Prints failure groups.
pub fn groups(groups: &[durabus::DeadLetterGroup]) {
    if groups.is_empty() {
        println!("no failure groups: the dead-letter queue is empty");
        return;
    }
    println!(
        "{:<16}  {:>7}  {:>7}  {:<20}  {:<24}  {:<24}  SAMPLE",
        "GROUP", "OPEN", "TOTAL", "SUBSCRIPTION", "FIRST SEEN", "LAST SEEN"
    );
    for g in groups {
        println!(
            "{:<16}  {:>7}  {:>7}  {:<20}  {:<24}  {:<24}  {}",
            g.fingerprint,
            g.open,
            g.count,
            clip(g.subscription.as_deref().unwrap_or("-"), 20),
            g.first_seen,
            g.last_seen,
            clip(&g.sample_error, 60)
        );
        println!("{:<16}  types: {}", "", g.event_types.join(", "));
    }
}

/// Prints operations as a table.
pub fn operations(list: &[durabus::Operation]) {
    if list.is_empty() {
        println!("no operations");
        return;
    }
    println!(
        "{:<36}  {:<22}  {:<9}  {:>15}  {:<12}  CREATED",
        "ID", "KIND", "STATUS", "DONE/TOTAL", "ACTOR"
    );
    for op in list {
        println!(
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
    println!("operation   {}", op.id);
    println!("kind        {}", op.kind);
    println!("status      {}", op.status);
    println!(
        "progress    {} processed, {} skipped, {} errors, of {} selected",
        op.processed, op.skipped, op.errors, op.total
    );
    println!("actor       {} ({})", op.actor.name, op.actor.kind.as_str());
    println!("created     {}", op.created_at);
    println!("started     {}", ts(op.started_at));
    println!("finished    {}", ts(op.finished_at));
    println!(
        "duration    {} ms",
        op.duration_ms(durabus::Timestamp::now())
    );
    println!("selection   {}", op.params);
    if let Some(summary) = &op.summary {
        println!("summary     {summary}");
    }
    if op.cancel_requested && !op.status.is_finished() {
        println!("cancel      asked for; it stops after its current chunk");
    }
    if let Some(e) = &op.last_error {
        println!("error       {e}");
    }
}

/// Prints event counts per type.
pub fn type_counts(counts: &std::collections::BTreeMap<String, u64>) {
    for (t, n) in counts {
        println!("  {n:>10}  {t}");
    }
}

/// Prints a few events (samples) as a table.
pub fn event_list(events: &[Event]) {
    events_table(events, "  (none)");
}

/// Prints the scheduled jobs.
pub fn jobs(jobs: &[durabus::scheduler::JobInfo]) {
    println!(
        "{:<24}  {:<14}  {:<8}  {:<24}  {:<24}  LAST",
        "JOB", "SCHEDULE", "ENABLED", "NEXT RUN", "LAST RUN"
    );
    for j in jobs {
        let last = j.last.as_ref();
        println!(
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
        println!("no payload snapshots");
        return;
    }
    println!(
        "{:<16}  {:<24}  {:>9}  {:>10}  {:<5}  {:<6}  PAYLOAD",
        "STAGE", "TAKEN", "BYTES", "COMPRESSED", "MEDIA", "BASE64"
    );
    for s in list {
        let shown = match (&s.payload, &s.deleted) {
            (Some(p), _) => clip(p, 60),
            (None, Some(d)) => {
                format!("deleted {} by {}: {}", d.deleted_at, d.deleted_by, d.reason)
            }
            (None, None) => "-".into(),
        };
        println!(
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
        println!("no payload configuration: every stage is stored for 14 days, nothing redacted");
        return;
    }
    println!(
        "{:<28}  {:<24}  {:>5}  {:<30}  {:<6}  UPDATED",
        "EVENT TYPE", "STAGES", "DAYS", "REDACT", "BEFORE"
    );
    for c in rows {
        println!(
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
