//! The checker can fail: each bug planted in the store's recovery or operation registry is
//! found, with a trace.

use stopline_assurance::model_check::run;
use stopline_assurance::protocol::{Options, Property};
use stopline_store::planted::PlantedBug;

fn check(bug: PlantedBug, only: &str) -> stopline_assurance::model_check::Report {
    // Machine crashes at every step; single-process kills are left to the full check.
    let options = Options {
        planted: bug,
        only: Some(only.into()),
        no_kills: true,
        ..Options::default()
    };
    run(&options)
}

fn found(bug: PlantedBug, only: &str, property: Property) {
    let report = check(bug, only);
    let scenario = &report.protocol[0];
    let example = scenario.violations.get(&property).unwrap_or_else(|| {
        panic!(
            "{bug:?} was not found as a violation of {property:?}:\n{}",
            report.text()
        )
    });
    assert!(!report.ok());
    assert!(!example.trace.is_empty());
    assert!(report.text().contains("[FAIL]"));
    let json = report.json();
    assert_eq!(json["ok"], false);
    let listed = json["protocol"]["properties"].as_array().unwrap();
    let entry = listed
        .iter()
        .find(|p| p["name"] == property.name())
        .unwrap();
    assert_eq!(entry["pass"], false);
    assert!(entry["counterexample"]["trace"]
        .as_array()
        .is_some_and(|t| !t.is_empty()));
}

#[test]
fn recovery_that_clears_by_scope_loses_a_racing_stop() {
    found(
        PlantedBug::ClearByScope,
        "engage-vs-recover",
        Property::StopWins,
    );
}

#[test]
fn recovery_that_skips_its_rescan_gives_a_false_all_clear() {
    found(
        PlantedBug::SkipRescan,
        "engage-vs-recover",
        Property::NoFalseAllClear,
    );
}

#[test]
fn without_a_planted_bug_the_same_scenario_passes() {
    let report = check(PlantedBug::None, "engage-vs-recover");
    assert!(report.ok(), "{}", report.text());
}

#[test]
fn an_outcome_appended_without_fsync_is_lost_to_a_power_cut_and_found() {
    found(
        PlantedBug::OutcomeUnsynced,
        "op-cut-resolves-later",
        Property::OpsInDoubtOnlyWhenUnknown,
    );
}

#[test]
fn an_operation_in_doubt_that_blocks_everyone_is_found() {
    found(
        PlantedBug::DoubtBlocksEveryone,
        "op-cut-resolves-later",
        Property::DoubtBlocksOnlyItsAgent,
    );
}

#[test]
fn a_journal_snapshot_that_drops_a_dispatched_operation_unblocks_its_agent_and_is_found() {
    found(
        PlantedBug::CompactionDropsDispatched,
        "op-compaction",
        Property::DoubtBlocksOnlyItsAgent,
    );
}

#[test]
fn a_journal_snapshot_trusted_without_its_anchor_after_a_power_cut_unblocks_a_doubt_and_is_found() {
    found(
        PlantedBug::SnapshotAnchorUnchecked,
        "op-writer-snapshot",
        Property::DoubtBlocksOnlyItsAgent,
    );
}

#[test]
fn a_wal_checkpoint_that_drops_the_pending_plans_lets_a_stop_coalesce_into_a_cleared_latch() {
    found(
        PlantedBug::CheckpointDropsPendingPlans,
        "checkpoint-vs-plan",
        Property::StopWins,
    );
}

#[test]
fn without_a_planted_bug_the_checkpoint_scenario_passes() {
    let report = check(PlantedBug::None, "checkpoint-vs-plan");
    assert!(report.ok(), "{}", report.text());
}

#[test]
fn a_batch_released_before_its_fsync_loses_a_prepared_record_and_is_found() {
    found(
        PlantedBug::GroupReleasedBeforeFsync,
        "op-batch-prepared",
        Property::PreparedSurvives,
    );
}

#[test]
fn an_archive_that_moves_a_journal_before_its_open_set_loses_a_doubt_and_is_found() {
    found(
        PlantedBug::ArchiveBeforeOpenSet,
        "op-archive",
        Property::DoubtBlocksOnlyItsAgent,
    );
}

#[test]
fn an_evidence_append_that_misses_a_segment_switch_forks_the_chain_and_is_found() {
    found(
        PlantedBug::SegmentSwitchUnseen,
        "evidence-segments",
        Property::EvidenceKept,
    );
}

#[test]
fn pruning_that_removes_segments_before_its_marker_loses_the_chains_start_and_is_found() {
    found(
        PlantedBug::PruneBeforeMark,
        "evidence-segments",
        Property::EvidenceKept,
    );
}

#[test]
fn without_a_planted_bug_the_operation_scenarios_pass() {
    for only in [
        "op-cut-resolves-later",
        "op-cut-no-answer",
        "op-compaction",
        "op-writer-snapshot",
        "op-batch-prepared",
        "op-archive",
        "evidence-segments",
        "live-runs",
        "live-runs-older-home",
    ] {
        let report = check(PlantedBug::None, only);
        assert!(report.ok(), "{}", report.text());
    }
}

#[test]
fn a_spend_compaction_that_moves_a_journal_before_its_snapshot_loses_spending_and_is_found() {
    found(
        PlantedBug::SpendJournalMovedBeforeSnapshot,
        "spend-compaction",
        Property::SpendKept,
    );
}

#[test]
fn a_look_that_ignores_what_the_spend_snapshot_covers_counts_spending_twice_and_is_found() {
    found(
        PlantedBug::SpendCoveredCountedTwice,
        "spend-compaction",
        Property::SpendKept,
    );
}

#[test]
fn a_drill_index_renamed_before_its_fsync_is_lost_to_a_power_cut_and_is_found() {
    found(
        PlantedBug::DrillIndexRenamedBeforeFsync,
        "drill-index",
        Property::DrillGateAsTheLog,
    );
}

#[test]
fn a_reader_that_ignores_the_drill_line_after_the_head_passes_a_failed_drill_and_is_found() {
    found(
        PlantedBug::DrillLineAfterHeadIgnored,
        "drill-index",
        Property::DrillGateAsTheLog,
    );
}

#[test]
fn a_drill_summary_written_before_its_records_file_is_found() {
    found(
        PlantedBug::DrillSummaryBeforeRecords,
        "drills-split",
        Property::DrillGateAsTheLog,
    );
}

#[test]
fn without_a_planted_bug_the_drill_scenarios_pass() {
    for only in ["drill-index", "drills-older-home", "drills-split"] {
        let report = check(PlantedBug::None, only);
        assert!(report.ok(), "{}", report.text());
        let scenario = &report.protocol[0];
        assert!(scenario.states > 100, "{only}: {} states", scenario.states);
    }
}

#[test]
fn a_live_rewrite_that_drops_open_reservations_loses_spending_and_is_found() {
    found(
        PlantedBug::SpendRewriteDropsOpen,
        "spend-live-rewrite",
        Property::SpendKept,
    );
}

#[test]
fn a_live_rewrite_renamed_before_its_fsync_loses_spending_and_is_found() {
    found(
        PlantedBug::SpendRewriteRenamedUnsynced,
        "spend-live-rewrite",
        Property::SpendKept,
    );
}

#[test]
fn without_a_planted_bug_the_live_rewrite_scenario_passes() {
    let report = check(PlantedBug::None, "spend-live-rewrite");
    assert!(report.ok(), "{}", report.text());
    let scenario = &report.protocol[0];
    assert!(scenario.states > 100, "{} states", scenario.states);
}

#[test]
fn without_a_planted_bug_the_spend_scenario_passes() {
    let report = check(PlantedBug::None, "spend-compaction");
    assert!(report.ok(), "{}", report.text());
    let scenario = &report.protocol[0];
    assert!(scenario.states > 100, "{} states", scenario.states);
}

#[test]
fn recovery_that_skips_deferred_records_clears_a_stop_the_wal_never_recorded() {
    found(
        PlantedBug::SkipDeferredRecord,
        "deferred-vs-recover",
        Property::EveryStopOnRecord,
    );
}

#[test]
fn without_a_planted_bug_the_deferred_scenario_passes() {
    let report = check(PlantedBug::None, "deferred-vs-recover");
    assert!(report.ok(), "{}", report.text());
}

#[test]
fn a_live_run_reader_that_trusts_another_instances_registration_hides_a_running_worker_and_is_found(
) {
    found(
        PlantedBug::LiveEntryTrustsAnyRegistration,
        "live-runs",
        Property::LiveWorkersReached,
    );
}

#[test]
fn a_live_run_entry_written_without_fsync_is_lost_to_a_power_cut_and_found() {
    found(
        PlantedBug::LiveEntryUnsynced,
        "live-runs",
        Property::LiveWorkersReached,
    );
}

#[test]
fn an_older_homes_index_marked_before_its_legacy_entries_hides_a_running_worker_and_is_found() {
    found(
        PlantedBug::LiveIndexMarkedFirst,
        "live-runs-older-home",
        Property::LiveWorkersReached,
    );
}

#[test]
fn an_append_that_does_not_cut_back_glues_a_durable_record_onto_a_torn_line_and_is_found() {
    found(
        PlantedBug::AppendNotCutBack,
        "op-full-disk",
        Property::RecordReadableIffDurable,
    );
}

#[test]
fn without_a_planted_bug_the_full_disk_scenario_passes() {
    let report = check(PlantedBug::None, "op-full-disk");
    assert!(report.ok(), "{}", report.text());
}

#[test]
fn a_reader_that_accepts_a_lower_epoch_acts_on_a_plane_gone_back_and_is_found() {
    found(
        PlantedBug::MarkAcceptsLowerEpoch,
        "plane-marks",
        Property::PlaneBelowMarksRefused,
    );
}

#[test]
fn without_a_planted_bug_the_plane_marks_scenario_passes() {
    let report = check(PlantedBug::None, "plane-marks");
    assert!(report.ok(), "{}", report.text());
}

#[test]
fn a_fold_without_the_margin_refuses_a_live_token_nothing_revoked_and_is_found() {
    found(
        PlantedBug::FoldWithoutMargin,
        "epoch-fold",
        Property::FoldSparesLiveAuthority,
    );
}

#[test]
fn a_fold_that_forgets_the_floor_revives_a_revoked_token_and_is_found() {
    found(
        PlantedBug::FoldWithoutFloor,
        "epoch-fold-floor",
        Property::NoPreStopAuthority,
    );
}

#[test]
fn without_a_planted_bug_the_fold_scenarios_pass() {
    let report = check(PlantedBug::None, "epoch-fold");
    assert_eq!(report.protocol.len(), 2, "{}", report.text());
    assert!(report.ok(), "{}", report.text());
}

#[test]
fn a_revocation_that_forgets_its_delegates_leaves_a_delegate_working_and_is_found() {
    found(
        PlantedBug::RevokeForgetsDelegates,
        "revoke-delegates",
        Property::RevokeRefusesOnlyItsTokens,
    );
}

#[test]
fn an_epoch_index_that_forgets_the_lineage_leaves_a_delegate_working_and_is_found() {
    found(
        PlantedBug::IndexForgetsAncestorDelegates,
        "revoke-delegates",
        Property::RevokeRefusesOnlyItsTokens,
    );
}

#[test]
fn a_gate_that_reads_staged_bodies_as_latches_reports_a_stop_never_published() {
    found(
        PlantedBug::StagedReadAsLatch,
        "staged-gate",
        Property::StagedOnlyRefusesMore,
    );
}

#[test]
fn without_a_planted_bug_the_revoke_scenarios_pass() {
    let report = check(PlantedBug::None, "revoke-");
    assert_eq!(report.protocol.len(), 3, "{}", report.text());
    assert!(report.ok(), "{}", report.text());
}

#[test]
fn without_a_planted_bug_the_staged_gate_scenario_passes() {
    let report = check(PlantedBug::None, "staged-gate");
    assert!(report.ok(), "{}", report.text());
}

#[test]
fn a_revoke_that_answers_before_its_gateway_acknowledged_leaves_the_token_working_and_is_found() {
    found(
        PlantedBug::RevokeAnswersBeforeAcks,
        "revoke-acknowledged",
        Property::RevokeRefusesOnlyItsTokens,
    );
}
