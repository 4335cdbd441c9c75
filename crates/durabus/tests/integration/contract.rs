//! Runs the contract suite against every store this build supports.

/// Declares one `#[tokio::test]` per suite function for a backend.
macro_rules! contract {
    ($backend:ident: $make:expr; $($module:ident :: $test:ident),* $(,)?) => {
        mod $backend {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let Some(h) = $make.await else { return };
                    crate::suite::$module::$test(&h).await;
                    h.finish().await;
                }
            )*
        }
    };
}

macro_rules! all_contract_tests {
    ($backend:ident: $make:expr) => {
        contract!($backend: $make;
            publish::publish_stores_delivers_and_returns_the_id,
            publish::metadata_is_stored_and_handed_to_handlers,
            publish::enqueue_returns_before_delivery_and_workers_deliver,
            publish::many_enqueued_events_are_each_delivered_once,
            publish::handlers_run_sequentially_in_subscription_order,
            publish::patterns_route_events_as_the_matching_table_says,
            publish::an_event_nobody_subscribes_to_is_done,
            publish::subscribe_stores_a_row_and_unsubscribe_removes_it,
            publish::bad_input_is_rejected_and_nothing_is_stored,
            publish::a_batch_is_stored_all_or_nothing_and_delivered,
            publish::an_idle_worker_is_handed_an_enqueued_event_without_a_claim,
            publish::enqueues_racing_a_shutdown_lose_nothing,
            retry::a_failure_is_retried_on_the_persisted_schedule,
            retry::exhausted_retries_move_the_event_to_the_dlq_intact,
            retry::overrides_of_matching_subscriptions_merge_most_permissively,
            retry::a_retry_runs_only_the_handlers_that_have_not_succeeded,
            retry::named_delivery_records_survive_a_restart,
            retry::a_handler_timeout_is_a_failure,
            retry::the_default_handler_timeout_applies,
            retry::a_panicking_handler_does_not_take_the_bus_down,
            lifecycle::publish_subscribe_and_enqueue_after_shutdown_fail,
            lifecycle::shutdown_waits_for_in_flight_dispatches,
            lifecycle::drain_timeout_abandons_handlers_and_recovery_finishes_them,
            lifecycle::start_recovers_events_stuck_in_processing,
            lifecycle::a_crash_during_back_off_loses_nothing,
            lifecycle::attempts_used_up_by_crashes_end_in_the_dlq_without_another_run,
            lifecycle::a_dropped_publish_still_finishes_its_delivery,
            lifecycle::shutdown_removes_unnamed_subscription_rows_and_keeps_named_ones,
            lifecycle::concurrent_subscribes_with_one_name_let_exactly_one_through,
            lifecycle::events_claimed_but_not_started_are_released_at_shutdown,
            claims::a_worker_holds_no_more_than_its_slots_plus_the_prefetch_while_handlers_block,
            claims::a_backlog_shut_down_midway_leaves_nothing_claimed_and_finishes_once,
            claims::a_claim_ahead_that_fails_is_reported_to_the_error_hook,
            lifecycle::the_error_hook_hears_what_fails_in_the_background,
            breaker::an_open_breaker_defers_events_and_a_probe_closes_it,
            breaker::a_half_open_breaker_lets_exactly_one_probe_through,
            breaker::a_probe_skipped_by_an_earlier_failure_is_released,
            breaker::outcomes_are_recorded_only_for_handlers_that_ran,
            breaker::metrics_follow_a_scripted_run,
            dlq::list_pages_dead_events_newest_first,
            dlq::list_returns_at_most_100_by_default,
            dlq::retry_resets_a_dead_event_and_it_is_delivered_again,
            dlq::purge_deletes_dead_events_created_at_or_before_the_cutoff,
            store::claims_only_due_events_and_never_the_same_twice,
            store::claims_come_out_earliest_due_first,
            store::listing_filters_by_status_and_type_and_counts,
            store::data_survives_close_and_reopen_and_closed_stores_refuse_work,
            store::a_failed_insert_stores_none_of_its_events,
            store::an_id_already_stored_is_stored_once,
            lifecycle::poll_and_finalize_run_a_loop_of_ones_own,
            lifecycle::recover_without_start_sends_a_crashed_loops_events_back,
            history::publishing_one_id_again_stores_and_delivers_it_once,
            history::history_lists_by_type_status_and_time,
            history::purge_removes_only_done_events_completed_at_or_before_the_cutoff,
            history::finished_events_are_counted_per_minute,
            store::stats_count_by_status_type_and_retries,
            stats::the_stats_snapshot_is_kept_until_the_next_refresh,
            store::release_returns_claimed_events_without_an_attempt,
            store::any_metadata_and_payload_text_comes_back_exactly,
            publish::system_types_are_reserved_for_the_bus,
            lifecycle::finalize_failures_are_counted_like_handler_failures,
            lifecycle::dead_letters_from_interrupted_attempts_are_counted,
            dead_letters::a_dead_letter_gets_a_record_and_is_announced,
            dead_letters::the_auto_retry_schedule_runs_1h_6h_24h_then_manual,
            dead_letters::retried_dead_letters_among_fresh_events_resolve_their_records,
            dead_letters::actions_follow_the_rules_and_say_why,
            dead_letters::a_retry_no_worker_has_picked_up_can_be_resolved_or_abandoned,
            dead_letters::a_failing_system_handler_makes_no_cascade,
            dead_letters::failure_groups_gather_the_same_failure,
            dead_letters::a_new_failure_group_is_announced_once,
            dead_letters::group_trends_count_dead_letters_per_hour_and_mark_new_groups,
            dead_letters::listings_filter_and_page_by_keyset,
            dead_letters::retention_deletes_closed_dead_letters_after_30_days,
            operations::a_bulk_action_previews_freezes_its_selection_and_finishes,
            operations::a_bulk_run_killed_mid_way_resumes_without_doing_a_chunk_twice,
            operations::an_operation_is_cancelled_between_chunks,
            operations::a_batch_passes_over_records_that_left_its_selection,
            operations::a_chunk_refused_by_its_operation_writes_none_of_its_actions,
            operations::open_operations_are_listed_and_taken_by_the_rules,
            operations::a_started_bus_runs_submitted_operations_itself,
            operations::jobs_run_once_per_tick_and_are_skipped_while_running,
            payloads::snapshots_round_trip_byte_for_byte,
            payloads::realistic_json_compresses_five_to_ten_times,
            payloads::configuration_is_per_type_with_a_default,
            payloads::a_configuration_change_touches_only_what_it_names,
            payloads::automatic_snapshots_follow_the_configuration,
            payloads::a_soft_delete_clears_the_bytes_and_keeps_the_audit,
            payloads::published_snapshots_outlive_their_events_and_expire,
            payloads::operators_see_redacted_payloads_and_handlers_the_original,
            payloads::retention_deletes_snapshots_past_their_types_days,
            replay::a_time_range_replay_republishes_new_events_that_reach_handlers,
            replay::replays_select_by_ids_types_and_statuses,
            replay::a_dry_run_reports_and_changes_nothing,
            replay::the_selection_is_frozen_at_submit,
            replay::the_rate_limit_paces_on_the_injected_clock,
            replay::a_replay_is_cancelled_between_chunks,
            replay::a_replay_killed_mid_way_resumes_exactly_once,
            replay::a_handler_replay_hands_events_over_and_counts_failures,
            replay::bad_replay_requests_are_refused,
            replay::a_started_bus_runs_submitted_replays,
            replay::an_operations_only_bus_runs_operations_and_claims_nothing,
            telemetry::counters_follow_a_scripted_run,
            telemetry::gauges_come_from_the_store_and_are_cached,
            telemetry::a_store_that_cannot_be_read_shows_down_and_the_counters_stay,
            telemetry::replays_are_counted,
            telemetry::handler_failures_reach_the_error_hook_when_asked,
            group_metrics::the_largest_failure_groups_are_labelled_and_new_ones_counted,
            group_metrics::ten_thousand_distinct_errors_stay_eleven_series,
            telemetry::a_bad_prefix_is_refused_and_a_good_one_is_used,
            schedule::a_delayed_event_waits_for_its_time_and_is_delivered_once,
            schedule::a_time_in_the_past_means_now,
            schedule::a_scheduled_event_survives_a_restart,
            schedule::scheduled_events_are_claimed_when_due_in_due_order,
            schedule::due_events_are_claimed_highest_priority_first_and_fifo_within_one,
            schedule::a_delayed_prioritised_batch_is_delivered_by_priority_when_due,
            schedule::bad_publish_options_are_refused_and_nothing_is_stored,
            schedule::scheduled_depth_is_a_gauge,
            schedule::a_prioritised_event_is_claimed_again_after_each_way_back_to_pending,
            cancel::a_scheduled_or_pending_event_cancelled_never_runs,
            cancel::what_cannot_be_cancelled_is_refused_and_nothing_changes,
            cancel::a_running_event_finishes_and_no_retry_follows,
            cancel::a_cancel_during_an_attempt_survives_a_crash,
            cancel::an_event_cancelled_for_one_subscription_runs_the_others,
        );
    };
}

all_contract_tests!(sqlite: async { Some(crate::support::Harness::sqlite()) });
all_contract_tests!(postgres: crate::support::Harness::postgres());
all_contract_tests!(memory: async { Some(crate::support::Harness::memory().await) });
