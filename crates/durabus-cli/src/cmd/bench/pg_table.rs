//! The PostgreSQL figures as a table, each beside its target and its same-run limit.

use super::postgres::PgReport;
use super::verdict::Misses;

/// Prints the PostgreSQL figures as a table, each judged, and then the targets this run
/// missed.
pub fn print_table(r: &PgReport) {
    let mut misses = Misses::default();
    // Counted by the end-to-end run: without it, 0 says nothing.
    let none_allowed = if r.e2e_eps > 0.0 { "0" } else { "—" };
    outln!();
    outln!(
        "PostgreSQL, {} worker processes, {} events, runs: {}, took {:.0} s",
        r.workers,
        r.events,
        r.runs,
        r.seconds
    );
    outln!("{:<36}  {:>12}  target", "figure", "measured");
    let rows = [
        (
            "publish, 1 caller (ev/s)",
            format!("{:.0}", r.publish_seq_eps),
            "—",
        ),
        (
            "  raw one-row commits beside it (ev/s)",
            if r.publish_seq_raw_eps > 0.0 {
                format!(
                    "{:.0} (publish {:.2}×)",
                    r.publish_seq_raw_eps,
                    r.publish_seq_eps / r.publish_seq_raw_eps
                )
            } else {
                "0".into()
            },
            "publish ≥ 0.9×",
        ),
        (
            "publish, concurrent (ev/s)",
            format!("{:.0}", r.publish_concurrent_eps),
            "—",
        ),
        (
            "publish, batch (ev/s)",
            format!("{:.0}", r.publish_batch_eps),
            "—",
        ),
        (
            "  unnest + id table beside it (rows/s)",
            if r.publish_batch_limit_eps > 0.0 {
                format!(
                    "{:.0} (publish {:.2}×)",
                    r.publish_batch_limit_eps, r.publish_batch_ratio
                )
            } else {
                "0".into()
            },
            "publish ≥ 0.9×",
        ),
        ("end to end (ev/s)", format!("{:.0}", r.e2e_eps), "≥ 10,000"),
        (
            "double completions",
            r.double_completions.to_string(),
            none_allowed,
        ),
        ("lost events", r.lost_events.to_string(), none_allowed),
        (
            "publish → other process p50 (µs)",
            format!(
                "{:.0} ({} samples)",
                r.notify_latency_p50_us, r.notify_latency_samples
            ),
            "—",
        ),
        (
            "publish → other process p99 (µs)",
            format!("{:.0}", r.notify_latency_p99_us),
            "< 10,000",
        ),
        (
            "scheduled, start after due p99 (ms)",
            format!(
                "{:.1} (p50 {:.1}, {} samples)",
                r.scheduled_late_p99_ms, r.scheduled_late_p50_ms, r.scheduled_late_samples
            ),
            "< 100",
        ),
        (
            "publish ×1000 with 1M scheduled (× empty)",
            format!(
                "{:.2} ({:.0} / {:.0})",
                r.scheduled_full_publish_eps / r.scheduled_empty_publish_eps.max(1.0),
                r.scheduled_full_publish_eps,
                r.scheduled_empty_publish_eps
            ),
            "≥ 0.9",
        ),
        (
            "drain with 1M scheduled (× empty)",
            format!(
                "{:.2} ({:.0} / {:.0})",
                r.scheduled_full_drain_eps / r.scheduled_empty_drain_eps.max(1.0),
                r.scheduled_full_drain_eps,
                r.scheduled_empty_drain_eps
            ),
            "≥ 0.9",
        ),
        (
            "end to end, 1,000 ordering keys (× none)",
            format!(
                "{:.2} ({:.0} / {:.0})",
                r.ordering_keyed_e2e_eps / r.ordering_unkeyed_e2e_eps.max(1.0),
                r.ordering_keyed_e2e_eps,
                r.ordering_unkeyed_e2e_eps
            ),
            "≥ 0.8",
        ),
        (
            "DLQ records page (ms)",
            format!("{:.2}", r.dlq_records_page_ms),
            "< 10 (1M)",
        ),
        ("DLQ groups (ms)", format!("{:.2}", r.dlq_groups_ms), "—"),
        (
            "admin API, 50 clients listing DLQ: p99 (ms)",
            format!(
                "{:.2} (p50 {:.2}; {:.0} req/s)",
                r.api_list_p99_ms, r.api_list_p50_ms, r.api_list_rps
            ),
            "—",
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
            "bulk retry (dead letters/s)",
            format!("{:.0}", r.bulk_retry_eps),
            "≥ 20,000",
        ),
        (
            "publish p99 during bulk (× before)",
            if r.bulk_publish_p99_ms > 0.0 && r.bulk_baseline_p99_ms > 0.0 {
                format!(
                    "{:.2}× ({:.2} ms; before: {:.2} ms)",
                    r.bulk_publish_p99_ms / r.bulk_baseline_p99_ms,
                    r.bulk_publish_p99_ms,
                    r.bulk_baseline_p99_ms
                )
            } else {
                "0".into()
            },
            "< 2×",
        ),
    ];
    for (name, value, target) in rows {
        let target = misses.mark(name, &value, target);
        outln!("{name:<36}  {value:>12}  {target}");
    }
    if let Some(l) = &r.limits {
        outln!();
        outln!(
            "{:<36}  {:>12}  library figure as a share of it",
            "raw limit (same run)",
            "ev/s"
        );
        let ratio = |x: f64, limit: f64| {
            if x > 0.0 && limit > 0.0 {
                format!("{:.2}", x / limit)
            } else {
                "—".into()
            }
        };
        let rows = [
            (
                "one-row INSERT, one commit each",
                l.one_row_commit_eps,
                ratio(r.publish_seq_eps, l.one_row_commit_eps) + " (publish, 1 caller)",
            ),
            (
                "the same, interleaved with publishes",
                r.publish_seq_raw_eps,
                ratio(r.publish_seq_eps, r.publish_seq_raw_eps) + " (publish, 1 caller)",
            ),
            (
                "INSERT … unnest, 1,000 rows",
                l.unnest_insert_eps,
                ratio(r.publish_batch_eps, l.unnest_insert_eps) + " (publish, batch)",
            ),
            (
                "COPY, 1,000 rows",
                l.copy_insert_eps,
                ratio(r.publish_batch_eps, l.copy_insert_eps) + " (publish, batch)",
            ),
            (
                "unnest + id table, 1,000 rows",
                l.unnest_with_ids_eps,
                ratio(r.publish_batch_eps, l.unnest_with_ids_eps)
                    + " (publish, batch; judged against the interleaved limit above)",
            ),
            (
                "claim 100 + complete, 4 callers",
                l.claim_complete_eps,
                ratio(r.e2e_eps, l.claim_complete_eps) + " (end to end)",
            ),
            (
                "unnest insert beside claim + complete",
                l.end_to_end_eps,
                format!(
                    "{} (end to end; target ≥ 0.85: {})",
                    ratio(r.e2e_eps, l.end_to_end_eps),
                    misses.ratio(
                        "end to end against the same-run raw end-to-end limit",
                        r.e2e_eps,
                        l.end_to_end_eps,
                        0.85
                    )
                ),
            ),
        ];
        for (name, eps, share) in rows {
            outln!("{name:<36}  {eps:>12.0}  {share}");
        }
        outln!(
            "{:<36}  {:>12}  publish → other process p99 as a multiple of it",
            "one-row commit every 2 ms: p50 / p99",
            "µs"
        );
        outln!(
            "{:<36}  {:>12}  {}",
            "",
            format!(
                "{:.0} / {:.0}",
                l.spaced_commit_p50_us, l.spaced_commit_p99_us
            ),
            ratio(r.notify_latency_p99_us, l.spaced_commit_p99_us)
        );
    }
    if let Some(f) = &r.flow {
        super::flow::print(f, &mut misses);
    }
    misses.print();
}
