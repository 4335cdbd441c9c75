//! The table `durabus bench` prints for SQLite: each figure beside its target.

use super::Report;
use super::verdict::Misses;

/// Prints the SQLite figures of `r` as a table beside their targets, each judged, and then
/// the targets this run missed.
pub(super) fn print(r: &Report) {
    let mut misses = Misses::default();
    let concurrent_target = if r.durability == "full" {
        "≥ 40,000"
    } else {
        "≥ 100,000"
    };
    let rows: Vec<(&str, String, &str)> = vec![
        (
            "publish, 1 caller (ev/s)",
            format!("{:.0}", r.publish_seq_eps),
            "≥ 20,000",
        ),
        (
            "  raw one-row commits, same run",
            if r.raw_sqlite_commit_eps > 0.0 {
                format!(
                    "{:.0} (publish {:.2}×)",
                    r.raw_sqlite_commit_eps,
                    r.publish_seq_eps / r.raw_sqlite_commit_eps
                )
            } else {
                "0".into()
            },
            "publish ≥ 0.9×",
        ),
        (
            "publish, concurrent (ev/s)",
            format!("{:.0}", r.publish_concurrent_eps),
            concurrent_target,
        ),
        (
            "publish, concurrent + snapshots (ev/s)",
            format!(
                "{:.0} ({:+.1} %, {:.0} B/event)",
                r.publish_snapshot_eps,
                (r.publish_snapshot_eps / r.publish_concurrent_eps.max(1.0) - 1.0) * 100.0,
                r.snapshot_bytes_per_event
            ),
            "≥ −15 %",
        ),
        (
            "publish, batch (ev/s)",
            format!("{:.0}", r.publish_batch_eps),
            "≥ 150,000",
        ),
        ("end to end (ev/s)", format!("{:.0}", r.e2e_eps), "≥ 40,000"),
        (
            "end to end, OpenTelemetry layer (× none)",
            format!(
                "{:.2} (median of pairs; medians {:.0} / {:.0})",
                r.otel_layer_ratio, r.otel_layer_eps, r.otel_none_eps
            ),
            "≥ 0.8",
        ),
        (
            "end to end, layer, simple processor (× none)",
            format!("{:.2} ({:.0})", r.otel_simple_ratio, r.otel_simple_eps),
            "—",
        ),
        ("latency p50 (µs)", format!("{:.0}", r.latency_p50_us), "—"),
        (
            "latency p99 (µs)",
            format!("{:.0}", r.latency_p99_us),
            "< 1,000",
        ),
        (
            "DLQ first page, 10k (ms)",
            format!("{:.3}", r.dlq_list_10k_ms),
            "< 2",
        ),
        (
            "DLQ first page, 1M (ms)",
            r.dlq_list_1m_ms
                .map_or("skipped".into(), |v| format!("{v:.3}")),
            "< 10",
        ),
        (
            "DLQ records, type+status page (ms)",
            format!("{:.3}", r.dlq_records_page_ms),
            "< 10 (1M)",
        ),
        (
            "DLQ groups (ms)",
            format!("{:.3}", r.dlq_groups_ms),
            "< 200 (1M)",
        ),
        (
            "bulk retry (dead letters/s)",
            format!("{:.0}", r.bulk_retry_eps),
            "≥ 20,000",
        ),
        (
            "publish p99 during bulk (ms)",
            format!(
                "{:.2} (before: {:.2})",
                r.bulk_publish_p99_ms, r.bulk_baseline_p99_ms
            ),
            "< 5",
        ),
        (
            "replay, unthrottled (ev/s)",
            format!("{:.0}", r.replay_eps),
            "≥ 40,000",
        ),
        (
            "replay, limited: rate (ev/s)",
            format!(
                "{:.0} (worst 10 s: {:.0}; limit {})",
                r.replay_rate_measured_eps, r.replay_rate_worst_window_eps, r.replay_rate_limit
            ),
            "± 10 %",
        ),
        (
            "publish p99 during replay (ms)",
            format!(
                "{:.2} (before: {:.2})",
                r.replay_live_p99_ms, r.replay_baseline_p99_ms
            ),
            "< 2",
        ),
        (
            "metrics scrape (ms)",
            format!(
                "{:.2} (cached: {:.2})",
                r.metrics_scrape_ms, r.metrics_scrape_cached_ms
            ),
            "< 5 (1M history)",
        ),
        (
            "admin API, 50 clients listing DLQ: p99 (ms)",
            format!(
                "{:.2} (p50 {:.2}; {:.0} req/s)",
                r.api_list_p99_ms, r.api_list_p50_ms, r.api_list_rps
            ),
            "< 20 (1M dead letters)",
        ),
        (
            "statistics: GET /api/v2/stats p99 (ms)",
            format!(
                "{:.2} (p50 {:.2}; a refresh of {} events: {:.0} ms)",
                r.stats.api_p99_ms, r.stats.api_p50_ms, r.stats.events, r.stats.refresh_ms
            ),
            "< 50 (1M events)",
        ),
        (
            "recovery, 100 (ms)",
            format!("{:.1}", r.recovery_100_ms),
            "< 20",
        ),
        (
            "recovery, 100k (ms)",
            format!("{:.0}", r.recovery_100k_ms),
            "< 2,000",
        ),
        ("RSS before (MB)", format!("{:.1}", r.rss_start_mb), "—"),
        ("RSS after (MB)", format!("{:.1}", r.rss_end_mb), "flat"),
    ];
    let ratio = |with: f64, without: f64| {
        if without > 0.0 {
            format!("{:.0} ({:+.1} %)", with, (with / without - 1.0) * 100.0)
        } else {
            "—".into()
        }
    };
    let history = [
        (
            "publish, 64 callers (ev/s)",
            r.empty_publish_eps,
            r.history_publish_eps,
        ),
        (
            "drain a backlog (ev/s)",
            r.empty_drain_eps,
            r.history_drain_eps,
        ),
        ("end to end (ev/s)", r.empty_e2e_eps, r.history_e2e_eps),
    ];
    outln!();
    outln!(
        "durability: {}   runs: {}   took {:.0} s",
        r.durability,
        r.runs,
        r.seconds
    );
    outln!("{:<30}  {:>12}  target", "figure", "measured");
    for (name, value, target) in rows {
        let target = misses.mark(name, &value, target);
        outln!("{name:<30}  {value:>12}  {target}");
    }
    outln!();
    outln!(
        "with {} completed events in history (target: within 10 % of empty)",
        r.history_events
    );
    outln!("{:<30}  {:>12}  {:>20}", "figure", "empty", "with history");
    for (name, without, with) in history {
        let judged = misses.ratio(&format!("{name} with history"), with, without, 0.9);
        outln!(
            "{name:<30}  {without:>12.0}  {:>20}  {judged}",
            ratio(with, without)
        );
    }
    if let Some(s) = &r.schedule {
        schedule(s, &ratio, &mut misses);
    }
    if let Some(o) = &r.ordering {
        outln!();
        outln!(
            "end to end, {} events under {} ordering keys (target: ≥ 0.8 × without keys)",
            o.ordering_events,
            o.ordering_keys
        );
        outln!("{:<30}  {:>12}  {:>20}", "figure", "no keys", "with keys");
        let judged = misses.ratio(
            "end to end with ordering keys",
            o.keyed_e2e_eps,
            o.unkeyed_e2e_eps,
            0.8,
        );
        outln!(
            "{:<30}  {:>12.0}  {:>20}  {judged}",
            "end to end (ev/s)",
            o.unkeyed_e2e_eps,
            ratio(o.keyed_e2e_eps, o.unkeyed_e2e_eps)
        );
    }
    if let Some(f) = &r.flow {
        super::flow::print(f, &mut misses);
    }
    misses.print();
}

/// The `schedule` group's figures beside their targets.
fn schedule(s: &super::schedule::Figures, ratio: &dyn Fn(f64, f64) -> String, misses: &mut Misses) {
    outln!();
    outln!(
        "with {} events scheduled for next month (target: ≥ 0.9 × empty)",
        s.scheduled_events
    );
    outln!(
        "{:<30}  {:>12}  {:>20}",
        "figure",
        "empty",
        "with scheduled"
    );
    for (name, without, with) in [
        (
            "publish, 64 callers (ev/s)",
            s.empty_publish_eps,
            s.scheduled_publish_eps,
        ),
        (
            "drain a backlog (ev/s)",
            s.empty_drain_eps,
            s.scheduled_drain_eps,
        ),
        ("end to end (ev/s)", s.empty_e2e_eps, s.scheduled_e2e_eps),
    ] {
        let judged = misses.ratio(&format!("{name} with scheduled"), with, without, 0.9);
        outln!(
            "{name:<30}  {without:>12.0}  {:>20}  {judged}",
            ratio(with, without)
        );
    }
    outln!(
        "delayed event, start after due (ms, {} samples): p50 {:.2}, p99 {:.2}  target p99 < 10",
        s.late_samples,
        s.late_p50_ms,
        s.late_p99_ms
    );
    outln!(
        "priority 10 over {} priority 0 (ms, {} samples): p50 {:.2}, p99 {:.2}  target p99 < 50",
        s.overtake_backlog,
        s.overtake_samples,
        s.overtake_p50_ms,
        s.overtake_p99_ms
    );
}
