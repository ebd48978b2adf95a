//! `ops list` and `ops compact` (docs/reference.md §3, §8): the operation registry as the owner reads it.
//! Reconciliation is an owner-console verb: `stopline_owner::reconcile`, behind the console.

use crate::context::Context;
use crate::receipts::{OperationLine, OpsCompactReceipt, OpsListReceipt};

/// `ops list`: every operation, only the unresolved ones, or (with `older_than_s`) the ones in
/// doubt for longer than that. Each unresolved one says whom it blocks now: in doubt (its
/// writer gone, or marked so) and not a model request; one still in flight blocks nobody yet.
pub fn list(ctx: &Context, unresolved: bool, older_than_s: Option<u64>) -> OpsListReceipt {
    let (ops, errors) = ctx.store.ops().all();
    let selected: Vec<_> = match older_than_s {
        Some(secs) => ctx
            .store
            .ops()
            .in_doubt_older_than((secs as i64).saturating_mul(1000)),
        None => ops
            .into_values()
            .filter(|op| !unresolved || op.is_unresolved())
            .collect(),
    };
    // Oldest first, as prepared (ties by id), so the last line is the latest operation.
    let mut selected = selected;
    selected.sort_by(|a, b| (a.prepared_ms, &a.op).cmp(&(b.prepared_ms, &b.op)));
    let census = ctx.store.ops().census();
    let operations = selected
        .into_iter()
        .map(|operation| {
            let (mut in_flight, mut blocking) = (None, None);
            if operation.is_unresolved() {
                let entry = census.entries().find(|e| e.operation.op == operation.op);
                in_flight = Some(entry.is_some_and(|e| e.in_flight));
                blocking = Some(entry.is_some_and(|e| e.blocking));
            }
            let doubt = operation
                .is_unresolved()
                .then(|| operation.doubt.clone())
                .flatten();
            OperationLine {
                operation,
                in_flight,
                blocking,
                doubt,
            }
        })
        .collect();
    OpsListReceipt { operations, errors }
}

/// `ops compact`: rewrite the open-set snapshot of every journal that grew, then move the
/// journals of writers that are gone into the archive (`[retention] gone_journals`), and fold
/// their spending journals into `spend/settled.json`.
pub fn compact(ctx: &Context) -> OpsCompactReceipt {
    let (snapshots_written, mut errors) = ctx.store.ops().snapshot_journals(1);
    let archive = ctx
        .store
        .ops()
        .archive_gone_journals(ctx.config.retention.gone_journals);
    errors.extend(archive.errors);
    // The spending journals of gone writers likewise: folded into `spend/settled.json`, moved
    // to `spend/archive/` (and deleted there under `prune`).
    let spend = ctx
        .store
        .spend()
        .compact_journals(ctx.config.retention.gone_journals);
    errors.extend(spend.errors);
    OpsCompactReceipt {
        snapshots_written,
        journals_archived: archive.archived,
        journals_pruned: archive.pruned,
        spend_journals_compacted: spend.compacted,
        spend_journals_pruned: spend.pruned,
        errors,
    }
}
