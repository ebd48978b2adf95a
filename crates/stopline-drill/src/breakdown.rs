//! Where each caller's time to first rejection went: the caller's first refused call
//! joined, by request id, with the in-process gateway's timeline (`stopline_gateway::timeline`).
//!
//! Each caller's time from the pull to its first refusal is cut into four consecutive parts,
//! which add up to it:
//!
//! 1. **to handler**: pull → the gateway's handler had the request (0 when it had it before
//!    the pull): the request queued in the caller's client, the kernel or the gateway's
//!    connection task, i.e. behind other work on the two cores;
//! 2. **until latched**: → the gateway's view held the latch (0 when the request reached the
//!    handler after that): the engage's write and the gateway's noticing it;
//! 3. **answering**: → the refusal was ready in the handler: a call in flight woken and cut,
//!    a new call judged and refused;
//! 4. **delivery**: → the caller had it: hyper's write, the kernel, the caller's task being
//!    run by the load generator's runtime.
//!
//! The floor (stop engaged before the load) has no latch to wait for: its part 2 is always 0.
//! Against a live gateway there is no timeline: no breakdown.

use crate::agents::CallerReport;
use serde::Serialize;
use std::collections::HashMap;
use std::time::Instant;
use stopline_bench::stats::{round_ms, summarize, Summary};
use stopline_gateway::timeline::Mark;

/// One caller's first refused call, in parts (milliseconds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Parts {
    /// Pull → the handler had the request.
    pub to_handler_ms: f64,
    /// → the view held the latch.
    pub until_latched_ms: f64,
    /// → the refusal was ready.
    pub answering_ms: f64,
    /// → the caller had it.
    pub delivery_ms: f64,
    /// The sum: the caller's time to first rejection.
    pub total_ms: f64,
    /// The request reached the handler before the view held the latch (a call in flight,
    /// refused by a cut, while being prepared, or at dispatch).
    pub in_flight: bool,
}

/// The breakdown of one drill (or floor) over its callers.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Breakdown {
    /// Pull → the first changed view holding a latch that the gateway swapped in after the
    /// pull (`None` in a floor, or when no such swap was marked).
    pub view_latched_ms: Option<f64>,
    /// That swap's scan of the waiting calls: how long it took to wake them all.
    pub wake_scan_ms: Option<f64>,
    /// How many waiting calls it woke.
    pub woken: Option<usize>,
    /// Callers whose first refused call the gateway marked (received and answered).
    pub matched: usize,
    /// Of them, those whose request reached the handler before the view held the latch.
    pub in_flight: usize,
    /// Part 1 over the matched callers.
    pub to_handler_ms: Summary,
    /// Part 2.
    pub until_latched_ms: Summary,
    /// Part 3.
    pub answering_ms: Summary,
    /// Part 4.
    pub delivery_ms: Summary,
    /// The parts of the slowest callers: those at or above the p99 time to first rejection,
    /// slowest first.
    pub slowest: Vec<Parts>,
}

/// The breakdown of `reports` against the gateway's `marks`, the pull at `pulled`; `latched`
/// is false for a floor (its latch was in the view before the load).
pub fn breakdown(
    pulled: Instant,
    marks: &[Mark],
    reports: &[CallerReport],
    latched: bool,
) -> Breakdown {
    let mut received = HashMap::new();
    let mut answered = HashMap::new();
    let mut view = None;
    for mark in marks {
        match *mark {
            Mark::Received { request, at } => {
                received.entry(request).or_insert(at);
            }
            Mark::Answered { request, at, .. } => {
                answered.entry(request).or_insert(at);
            }
            Mark::View {
                stored,
                woke,
                latches,
                woken,
            } if latched && latches > 0 && stored >= pulled && view.is_none() => {
                view = Some((stored, woke, woken));
            }
            Mark::View { .. } => {}
        }
    }
    let ms = |from: Instant, to: Instant| to.saturating_duration_since(from).as_secs_f64() * 1e3;
    let mut parts: Vec<Parts> = reports
        .iter()
        .filter_map(|report| {
            let first = report.first_refused?;
            let got = *received.get(&first.request)?;
            let ready = *answered.get(&first.request)?;
            let t1 = pulled.max(got);
            let t2 = view.map_or(t1, |(stored, _, _)| t1.max(stored));
            let t3 = t2.max(ready);
            let t4 = t3.max(first.refused);
            Some(Parts {
                to_handler_ms: round_ms(ms(pulled, t1)),
                until_latched_ms: round_ms(ms(t1, t2)),
                answering_ms: round_ms(ms(t2, t3)),
                delivery_ms: round_ms(ms(t3, t4)),
                total_ms: round_ms(ms(pulled, t4)),
                in_flight: view.is_some_and(|(stored, _, _)| got < stored),
            })
        })
        .collect();
    let of = |f: fn(&Parts) -> f64| summarize(&parts.iter().map(f).collect::<Vec<_>>());
    let mut breakdown = Breakdown {
        view_latched_ms: view.map(|(stored, _, _)| round_ms(ms(pulled, stored))),
        wake_scan_ms: view.map(|(stored, woke, _)| round_ms(ms(stored, woke))),
        woken: view.map(|(_, _, woken)| woken),
        matched: parts.len(),
        in_flight: parts.iter().filter(|p| p.in_flight).count(),
        to_handler_ms: of(|p| p.to_handler_ms),
        until_latched_ms: of(|p| p.until_latched_ms),
        answering_ms: of(|p| p.answering_ms),
        delivery_ms: of(|p| p.delivery_ms),
        slowest: Vec::new(),
    };
    parts.sort_by(|a, b| b.total_ms.total_cmp(&a.total_ms));
    let p99 = summarize(&parts.iter().map(|p| p.total_ms).collect::<Vec<_>>()).p99;
    breakdown.slowest = parts
        .into_iter()
        .take_while(|p| p.total_ms >= p99)
        .collect();
    breakdown
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::FirstRefused;
    use std::time::Duration;

    /// Two callers: one whose call was in flight at the pull (at the handler before it, cut
    /// once the view held the latch), one whose call reached the handler after the latch; the
    /// parts of each add up to its time to first rejection.
    #[test]
    fn each_callers_time_is_cut_into_parts_that_add_up() {
        let pulled = Instant::now();
        let at = |ms: u64| pulled + Duration::from_millis(ms);
        let before = pulled.checked_sub(Duration::from_millis(5)).unwrap();
        let report = |request, sent, refused| CallerReport {
            first_refused: Some(FirstRefused {
                request,
                sent,
                refused,
            }),
            ..CallerReport::default()
        };
        let reports = [report(1, before, at(9)), report(2, at(4), at(12))];
        let marks = [
            Mark::Received {
                request: 1,
                at: before,
            },
            Mark::View {
                stored: at(3),
                woke: at(4),
                latches: 1,
                woken: 1,
            },
            Mark::Answered {
                request: 1,
                at: at(7),
                status: 403,
            },
            Mark::Received {
                request: 2,
                at: at(6),
            },
            Mark::Answered {
                request: 2,
                at: at(10),
                status: 403,
            },
        ];
        let b = breakdown(pulled, &marks, &reports, true);
        assert_eq!(b.view_latched_ms, Some(3.0));
        assert_eq!(b.wake_scan_ms, Some(1.0));
        assert_eq!((b.matched, b.in_flight), (2, 1));
        assert_eq!(
            b.slowest,
            vec![Parts {
                to_handler_ms: 6.0,
                until_latched_ms: 0.0,
                answering_ms: 4.0,
                delivery_ms: 2.0,
                total_ms: 12.0,
                in_flight: false,
            }]
        );
        assert_eq!((b.until_latched_ms.max, b.answering_ms.max), (3.0, 4.0));
        assert_eq!((b.to_handler_ms.p50, b.delivery_ms.p50), (0.0, 2.0));
        // A floor has no latch to wait for.
        let floor = breakdown(pulled, &marks, &reports, false);
        assert_eq!(floor.view_latched_ms, None);
        assert_eq!(floor.until_latched_ms.max, 0.0);
        assert_eq!(floor.in_flight, 0);
    }
}
