//! Printing events as tables or JSON.

use std::io::Write;

use durabus::Event;

use crate::table::{Table, number, text};

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

/// Prints events as a table, or a note when there are none.
pub fn events_table(events: &[Event], empty: &str) {
    if events.is_empty() {
        outln!("{empty}");
        return;
    }
    let mut t = Table::new(&[
        text("ID", 36),
        text("TYPE", 32),
        text("STATUS", 10),
        number("PRIO"),
        text("KEY", 16),
        number("RETRIES"),
        text("CREATED", 24),
        text("DUE", 24),
        text("LAST ERROR", 60),
    ]);
    for e in events {
        t.row(vec![
            e.id.to_string(),
            e.event_type.clone(),
            e.status.to_string(),
            e.priority.to_string(),
            e.ordering_key.clone().unwrap_or_else(|| "-".into()),
            e.retry_count.to_string(),
            e.created_at.to_string(),
            due(e.next_attempt_at),
            e.last_error().unwrap_or("-").to_owned(),
        ]);
    }
    t.print();
}

/// An event's due time as an operator reads it: a time, a pause that parked it, or the line
/// for a concurrency slot.
pub fn due(t: Option<durabus::Timestamp>) -> String {
    match t {
        Some(t) if t == durabus::concurrency::WAIT_MARK => "waiting for a concurrency slot".into(),
        Some(t) => match durabus::pause::parked_by(t) {
            Some(p) => format!("parked by pause {p}"),
            None => t.to_string(),
        },
        None => "-".into(),
    }
}

pub fn ts(t: Option<durabus::Timestamp>) -> String {
    t.map_or_else(|| "-".into(), |t| t.to_string())
}

/// Prints dead-letter records as a table, or a note when there are none.
pub fn dead_letters(items: &[durabus::DeadLetter], empty: &str) {
    if items.is_empty() {
        outln!("{empty}");
        return;
    }
    let mut t = Table::new(&[
        number("SEQ"),
        text("EVENT ID", 36),
        text("TYPE", 32),
        text("STATUS", 9),
        number("RETRY"),
        text("GROUP", 16),
        text("CREATED", 24),
        text("LAST ERROR", 60),
    ]);
    for d in items {
        t.row(vec![
            d.seq.to_string(),
            d.event_id.to_string(),
            d.event_type.clone(),
            d.status.to_string(),
            (d.auto_retry_count + d.manual_retry_count).to_string(),
            d.fingerprint.clone(),
            d.created_at.to_string(),
            d.last_error.clone(),
        ]);
    }
    t.print();
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
    if let Some(k) = &d.ordering_key {
        outln!(
            "ordering key   {k} ({} later event(s) of the key were waiting)",
            d.key_waiting.unwrap_or(0)
        );
    }
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
    match (&d.last_retry_at, &d.last_retry_by) {
        (Some(at), by) => outln!("last retry     {at} by {}", by.as_deref().unwrap_or("-")),
        (None, _) => outln!("last retry     never"),
    }
    for line in closing(d) {
        outln!("{line}");
    }
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

/// Prints one event in full.
pub fn event(e: &Event) {
    outln!("event          {}", e.id);
    outln!("type           {}", e.event_type);
    outln!("status         {}", e.status);
    outln!("created        {}", e.created_at);
    outln!("updated        {}", e.updated_at);
    if let Some(at) = e.deliver_at {
        outln!("scheduled for  {at}");
    }
    if e.priority != 0 {
        outln!("priority       {}", e.priority);
    }
    if let Some(k) = &e.ordering_key {
        outln!("ordering key   {k}");
    }
    if let Some(at) = e.next_attempt_at {
        outln!("next attempt   {}", due(Some(at)));
    } else if e.ordering_key.is_some()
        && matches!(
            e.status,
            durabus::EventStatus::Pending | durabus::EventStatus::Scheduled
        )
    {
        outln!("next attempt   after the earlier events of its ordering key");
    }
    if let Some(at) = e.dlq_at {
        outln!("dead since     {at}");
    }
    outln!("failed tries   {}", e.retry_count);
    if e.dlq_count > 0 {
        outln!(
            "dead letter    {} time(s); `durabus dlq show {}` has its record",
            e.dlq_count,
            e.id
        );
    }
    outln!(
        "handled by     {}",
        if e.delivered.is_empty() {
            "no subscription yet".to_owned()
        } else {
            e.delivered.join(", ")
        }
    );
    if !e.cancelled.is_empty() {
        outln!("cancelled for  {}", e.cancelled.join(", "));
    }
    if e.cancel_requested {
        outln!("cancel asked   while an attempt ran: no retry follows it");
    }
    for (k, v) in &e.metadata {
        outln!("metadata       {k} = {v}");
    }
    for err in &e.errors {
        outln!("error          {err}");
    }
    outln!("payload        {}", e.payload);
}

/// What a record's status says about how it was closed (or that it is still open), in words of
/// its own: an abandoned record is not "resolved".
fn closing(d: &durabus::DeadLetter) -> Vec<String> {
    use durabus::DeadLetterStatus as S;
    let at = ts(d.resolved_at);
    let by = d.resolved_by.as_deref().unwrap_or("-");
    let note = d.resolution_note.as_deref();
    match d.status {
        S::Pending => vec!["open           waiting for its next retry or an operator".into()],
        S::Retrying => {
            vec!["open           sent back for delivery; this round has not ended yet".into()]
        }
        S::Resolved if d.resolution_note.is_none() => {
            vec![format!(
                "resolved       {at}: delivered by the retry of {by}"
            )]
        }
        S::Resolved => vec![
            format!("resolved       {at} by {by}"),
            format!("note           {}", note.unwrap_or("-")),
        ],
        S::Abandoned => vec![
            format!("abandoned      {at} by {by} (no more automatic retries)"),
            format!("note           {}", note.unwrap_or("-")),
        ],
    }
}

/// Prints failure groups.
pub fn groups(groups: &[durabus::GroupTrend]) {
    if groups.is_empty() {
        outln!("no failure groups: the dead-letter queue is empty");
        return;
    }
    let mut t = Table::new(&[
        text("GROUP", 16),
        text("NEW", 3),
        number("OPEN"),
        number("TOTAL"),
        number("LAST 24H"),
        text("SUBSCRIPTION", 20),
        text("FIRST SEEN", 24),
        text("LAST SEEN", 24),
        text("TYPES", 30),
        text("SAMPLE", 60),
    ]);
    for trend in groups {
        let g = &trend.group;
        t.row(vec![
            g.fingerprint.clone(),
            if trend.new { "new" } else { "" }.to_owned(),
            g.open.to_string(),
            g.count.to_string(),
            trend.hourly.iter().sum::<u64>().to_string(),
            g.subscription.as_deref().unwrap_or("-").to_owned(),
            g.first_seen.to_string(),
            g.last_seen.to_string(),
            g.event_types.join(", "),
            g.sample_error.clone(),
        ]);
    }
    t.print();
}

/// Prints operations as a table.
pub fn operations(list: &[durabus::Operation]) {
    if list.is_empty() {
        outln!("no operations");
        return;
    }
    let mut t = Table::new(&[
        text("ID", 36),
        text("KIND", 22),
        text("STATUS", 9),
        number("DONE/TOTAL"),
        text("ACTOR", 16),
        text("CREATED", 24),
    ]);
    for op in list {
        t.row(vec![
            op.id.clone(),
            op.kind.to_string(),
            op.status.to_string(),
            format!("{}/{}", op.processed + op.skipped + op.errors, op.total),
            op.actor.name.clone(),
            op.created_at.to_string(),
        ]);
    }
    t.print();
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
    let mut t = Table::new(&[
        text("JOB", 24),
        text("SCHEDULE", 20),
        text("ENABLED", 7),
        text("NEXT RUN", 24),
        text("LAST RUN", 24),
        text("LAST", 80),
    ]);
    for j in jobs {
        let last = j.last.as_ref();
        t.row(vec![
            j.name.clone(),
            j.schedule.clone(),
            j.enabled.to_string(),
            ts(j.next_run),
            ts(last.and_then(|l| l.last_started_at)),
            last.map_or("never ran".into(), |l| {
                format!(
                    "{}: {}",
                    l.last_status.as_deref().unwrap_or("running"),
                    l.last_message.as_deref().unwrap_or("")
                )
            }),
        ]);
    }
    t.print();
}

/// Prints periodic events.
pub fn periodics(list: &[durabus::PeriodicInfo]) {
    if list.is_empty() {
        outln!("no periodic events (an application registers them with EventBus::periodic)");
        return;
    }
    let mut t = Table::new(&[
        text("NAME", 24),
        text("SCHEDULE", 16),
        text("TIME ZONE", 20),
        text("TYPE", 24),
        text("STATE", 7),
        text("NEXT TICK", 24),
        text("LAST TICK", 24),
    ]);
    for p in list {
        t.row(vec![
            p.row.name.clone(),
            p.row.schedule.clone(),
            p.row.timezone.clone(),
            p.row.event_type.clone(),
            if p.row.paused { "paused" } else { "running" }.to_owned(),
            ts(p.next_tick),
            ts(p.row.last_tick),
        ]);
    }
    t.print();
}

/// Prints payload snapshots.
pub fn snapshots(list: &[durabus::Snapshot]) {
    if list.is_empty() {
        outln!("no payload snapshots");
        return;
    }
    let mut t = Table::new(&[
        text("STAGE", 16),
        text("TAKEN", 24),
        number("BYTES"),
        number("COMPRESSED"),
        text("MEDIA", 5),
        text("BASE64", 6),
        text("PAYLOAD", 60),
    ]);
    for s in list {
        let shown = match (&s.payload, &s.deleted) {
            (Some(p), _) => p.clone(),
            (None, Some(d)) => {
                format!("deleted {} by {}: {}", d.deleted_at, d.deleted_by, d.reason)
            }
            (None, None) => "-".into(),
        };
        t.row(vec![
            s.stage.clone(),
            s.created_at.to_string(),
            s.size_original.to_string(),
            s.size_compressed.to_string(),
            s.contains_media.to_string(),
            s.contains_base64.to_string(),
            shown,
        ]);
    }
    t.print();
}

/// Prints payload configuration rows.
pub fn payload_configs(rows: &[durabus::PayloadConfig]) {
    if rows.is_empty() {
        outln!("no payload configuration: every stage is stored for 14 days, nothing redacted");
        return;
    }
    let mut t = Table::new(&[
        text("EVENT TYPE", 32),
        text("STAGES", 24),
        number("DAYS"),
        text("REDACT", 40),
        text("BEFORE", 6),
        text("UPDATED", 60),
    ]);
    for c in rows {
        t.row(vec![
            c.event_type.clone(),
            c.stages.join(","),
            c.retention_days.to_string(),
            c.redact.join(" "),
            c.redact_before_store.to_string(),
            format!("{} by {}", c.updated_at, c.updated_by),
        ]);
    }
    t.print();
}
