//! The store test suite: every test below runs against SQLite (a fresh temp file) and, when
//! `SWITCHBOARD_TEST_DATABASE_URL` is set, against PostgreSQL (a fresh schema), unchanged.

mod harness;

mod allowances;
mod backend;
mod change_log;
mod configuration;
mod endpoints;
mod events;
mod hot_paths;
mod leases;
mod operators;
mod plans;
mod rate_limits;
mod retention;
mod sealing;
mod tenancy;
mod todos;
mod trials;
mod webhooks;

/// Expands `module: [test, …]` lists into `sqlite::module::test` and `postgres::module::test`,
/// each calling `module::test(db)` on its own fresh database.
macro_rules! store_test_suite {
    ($($module:ident: [$($test:ident),* $(,)?]),* $(,)?) => {
        mod sqlite {
            $(mod $module {
                $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    crate::harness::run_sqlite(crate::$module::$test).await;
                })*
            })*
        }
        mod postgres {
            $(mod $module {
                $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    crate::harness::run_postgres(crate::$module::$test).await;
                })*
            })*
        }
    };
}

store_test_suite! {
    change_log: [
        a_persons_confirm_policy_change_appends_one_entry,
        every_saved_version_appends_one_entry_and_the_log_verifies,
        an_entry_changed_deleted_or_moved_in_the_database_is_named,
        concurrent_saves_append_one_chain_without_a_gap,
        upgrading_from_0018_starts_the_log_with_every_version_and_audit_row,
        an_operators_acts_are_logged_in_their_own_transaction_and_the_audit_lists_them,
        upgrading_from_0020_the_audit_lists_the_same_acts_from_the_log,
        a_webhooks_deletion_appends_one_entry_and_keeps_its_entries,
    ],
    backend: [
        migrations_apply_once_and_reconnect,
        sqlite_runs_in_wal_mode,
        unknown_database_url_is_refused,
        upgrading_from_0002_keeps_todos_and_a_forgery_no_longer_takes_the_once_key,
    ],
    allowances: [
        an_allowance_is_set_replaced_listed_and_cleared,
        an_agents_grant_must_lie_within_the_allowance_and_a_refusal_writes_nothing,
        upgrading_from_0005_allows_each_scope_the_queues_its_webhooks_already_grant,
    ],
    sealing: [
        a_database_dump_holds_no_webhook_secret,
        secrets_written_in_the_clear_are_sealed_at_start_and_still_verify,
        a_wrong_or_missing_key_is_refused_at_start,
        rotation_seals_every_secret_with_the_new_key,
    ],
    tenancy: [
        a_human_is_admin_of_its_own_scope_only,
        team_roles_are_set_replaced_and_removed,
        duplicates_and_bad_names_are_refused,
    ],
    endpoints: [
        vending_expands_families_and_authenticates,
        credential_is_hashed_at_rest,
        revoked_endpoint_fails_to_authenticate,
        vending_refuses_what_it_cannot_grant,
    ],
    webhooks: [
        create_sets_version_one_and_a_strong_id,
        an_endpoint_deletes_a_webhook_only_under_self,
        another_scopes_id_is_not_found_like_an_unknown_or_malformed_one,
        rotate_grant_and_switches,
        delete_takes_events_todos_and_history_along,
        bad_webhook_arguments_are_refused,
        a_webhook_copy_is_trusted_only_at_its_revision,
        upgrading_from_0013_gives_webhooks_a_revision_every_change_moves,
        a_stored_row_that_does_not_read_is_an_internal_error,
        upgrading_from_0022_keeps_webhooks_and_a_person_names_one,
    ],
    events: [
        body_and_headers_round_trip_byte_exact,
        events_list_newest_first_in_pages,
        replay_window_reads_recent_events_of_one_webhook,
        a_window_of_big_bodies_is_cut_at_its_byte_bound_and_says_so,
        unrouted_events_are_found_until_routed,
        decisions_are_counted_per_hour_and_label_in_the_database,
        recording_a_decision_on_an_unknown_event_writes_nothing,
        a_decision_is_recorded_once_and_the_first_stands,
        a_stored_event_is_visible_to_other_connections_at_once,
        failed_writes_leave_the_next_writer_free,
        concurrent_deliveries_share_commits_and_each_is_stored_once,
        a_delivery_decided_before_it_is_stored_is_one_write_with_its_todo,
        concurrent_decided_deliveries_share_commits_and_make_each_todo_once,
        with_one_statement_off_decided_deliveries_are_stored_the_same,
        a_batch_in_one_statement_answers_as_its_transaction_does,
        a_committer_whose_connection_died_loses_no_delivery,
        racing_decisions_in_shared_commits_record_one_each,
        upgrading_from_0012_keeps_bodies_and_compresses_new_ones_with_lz4,
        with_group_commit_off_each_write_commits_alone,
        upgrading_from_0009_leaves_old_decisions_unknown_and_grants_explain,
        upgrading_from_0010_keeps_events_redrivable_and_grants_redrive,
    ],
    trials: [
        a_trial_starts_once_per_webhook_and_is_scoped_like_it,
        a_trial_with_an_empty_limit_is_refused,
        a_webhooks_trials_list_in_pages,
        a_trial_read_while_batches_commit_adds_up,
        a_trials_batches_add_up_and_an_ended_trial_takes_none,
        upgrading_from_0014_keeps_webhooks_and_takes_trials,
        an_overdue_trial_ends_without_a_delivery,
        upgrading_from_0015_keeps_trials_and_their_counts,
        an_ended_trial_has_seen_every_delivery_stored_in_its_window,
        upgrading_from_0016_keeps_trials_and_guards_start_beside_them,
        upgrading_from_0017_keeps_plans_and_guards_and_reads_their_new_columns,
        upgrading_from_0024_finds_running_and_ended_trials_as_before,
    ],
    todos: [
        redelivery_creates_no_second_todo,
        todos_list_by_queue_in_pages,
        claim_and_complete,
        concurrent_claims_have_one_winner,
        a_claim_lapses_and_the_todo_is_back_in_its_queue,
        claiming_again_renews_the_lease,
        release_returns_the_todo_to_its_queue,
        completing_after_the_claim_lapsed,
        a_lapsed_holder_completing_races_new_claims,
        a_webhooks_claim_ttl_is_bounded_and_scoped,
        upgrading_from_0008_gives_old_claims_a_lease,
    ],
    configuration: [
        save_bumps_version_and_appends_history,
        version_mismatch_names_the_current_version,
        duplicate_save_writes_nothing,
        provenance_is_limited_to_4_kib,
        failed_save_leaves_nothing_partial,
        failed_decision_leaves_the_event_unrouted,
        history_pages_newest_first,
        packs_and_trusted_actors_are_saved_with_the_configuration,
        under_person_only_a_person_or_an_operator_saves,
    ],
    plans: [
        a_plan_is_consumed_once,
        upgrading_from_0006_keeps_every_endpoints_right_to_confirm,
        upgrading_from_0019_keeps_pending_plans_and_records_approvals,
        upgrading_from_0021_keeps_pending_plans_and_a_person_dismisses_one,
        a_plan_nobody_decided_stays_listed_until_its_grace_ends,
        twenty_concurrent_consumers_one_wins,
        another_scopes_token_is_not_found,
        expired_plan_is_stale,
        confirm_saves_exactly_the_planned_candidate,
        confirm_refuses_a_plan_the_webhook_moved_past,
    ],
    operators: [
        operator_credentials_are_hashed_and_their_own_kind,
        upgrading_from_0010_adds_operators_and_keeps_everything,
    ],
    leases: [
        one_replay_lease_holder_at_a_time,
        an_expired_lease_can_be_taken_over,
        two_concurrent_acquisitions_one_wins,
    ],
    retention: [
        purges_exactly_what_is_past_the_bound_and_nothing_a_todo_still_needs,
        a_webhook_keeps_its_newest_events_up_to_the_count,
        upgrading_from_0003_keeps_every_event_and_retention_purges_only_past_the_bound,
        upgrading_from_0023_fills_each_webhooks_event_count,
    ],
    rate_limits: [
        limit_per_window_then_retry_after,
        concurrent_takes_never_exceed_the_limit,
        the_11th_replay_inside_any_60_s_is_refused,
        concurrent_sliding_takes_on_two_replicas_never_exceed_the_limit,
        held_hits_across_replicas_let_exactly_the_limit_through,
        many_webhooks_first_takes_share_commits,
        bad_limits_are_refused,
    ],
}

/// PostgreSQL only: it reads the per-table scan counts SQLite does not keep (issue 50).
mod postgres_only {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_held_up_grant_holds_up_only_its_own_webhook() {
        crate::harness::run_postgres(
            crate::rate_limits::a_held_up_grant_holds_up_only_its_own_webhook,
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn hot_paths_reach_events_todos_plans_and_trials_by_index_only() {
        crate::harness::run_postgres(
            crate::hot_paths::hot_paths_reach_events_todos_plans_and_trials_by_index_only,
        )
        .await;
    }
}
