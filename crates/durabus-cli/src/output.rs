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
