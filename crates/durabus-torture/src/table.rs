//! The suite's table.

use crate::scenario::Row;

/// One row as a progress line.
pub fn line(r: &Row) -> String {
    format!(
        "   {} {}: {} cycles, {} acknowledged, {} lost, {} duplicates, {} faults, {:.1} s",
        if r.passed() { "ok" } else { "FAILED" },
        r.scenario,
        r.cycles,
        r.acknowledged,
        r.lost,
        r.duplicates,
        r.faults,
        r.took.as_secs_f64()
    )
}

/// Every row as a Markdown table.
pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "| scenario | cycles | acknowledged | lost | duplicates | faults injected | time to recover | result | time | notes |\n|---|---:|---:|---:|---:|---:|---:|---|---:|---|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.0} s | {} |\n",
            r.scenario,
            r.cycles,
            r.acknowledged,
            r.lost,
            r.duplicates,
            r.faults,
            r.recovered
                .map_or_else(|| "—".to_owned(), |d| format!("{:.1} s", d.as_secs_f64())),
            if r.passed() { "pass" } else { "**FAIL**" },
            r.took.as_secs_f64(),
            r.notes.replace('|', "/")
        ));
    }
    out
}
