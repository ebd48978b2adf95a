//! Whole reads of the evidence log: every segment (or the newest two) read and verified as one
//! chain, for `evidence verify`, `evidence list` and an index rebuilt from the history. Never
//! on a hot path.

use super::segments::first_prev;
use super::{seq_line, unreadable, Evidence, SegmentSummary};
use crate::Store;
use stopline_core::wal::{self, WalEntry, WalFault};

/// The evidence log read and verified across segments.
#[derive(Debug, Clone, Default)]
pub struct EvidenceChain {
    /// Every verified record, oldest first.
    pub entries: Vec<WalEntry>,
    /// The segments read, oldest first.
    pub segments: Vec<SegmentSummary>,
    /// How many segments the log has (read or not; pruned ones not counted).
    pub total_segments: usize,
    /// The last record pruned with its segment (`[retention] evidence_keep_segments`), if any.
    pub pruned_through: Option<u64>,
}

impl Store {
    /// [`Evidence::chain`] for a caller that holds the log's lock.
    pub(crate) fn evidence_chain_held(&self, all: bool) -> Result<EvidenceChain, WalFault> {
        let pruned = self
            .evidence()
            .pruned()
            .map_err(|why| WalFault::Unparsable { line: 0, why })?;
        let mut segments = self.evidence_segments().map_err(unreadable)?;
        // Segments the pruning marker covers are gone or going (a crash before their removal).
        if let Some((through, _)) = &pruned {
            segments.retain(|(first, _)| first > through);
        }
        let start = if all {
            0
        } else {
            segments.len().saturating_sub(2)
        };
        let mut chain = EvidenceChain {
            total_segments: segments.len(),
            pruned_through: pruned.as_ref().map(|(through, _)| *through),
            ..EvidenceChain::default()
        };
        // With `all`, the chain starts at record 1, or right after the pruned records, chained
        // to the last of them.
        let mut previous: Option<(u64, String)> = pruned.filter(|_| all);
        for (i, (first, name)) in segments.iter().enumerate().skip(start) {
            let bytes = self
                .read_optional(&self.layout.evidence().join(name))
                .map_err(unreadable)?
                .unwrap_or_default();
            let expected = match &previous {
                Some((seq, _)) => seq + 1,
                None if all => 1,
                // The oldest segment read without its predecessor: its first line's link is
                // taken as it is (the segment before is verified only with `all`).
                None => *first,
            };
            if *first != expected {
                return Err(if *first > expected {
                    WalFault::Missing {
                        line: seq_line(expected),
                        last: first - 1,
                    }
                } else {
                    WalFault::Gap {
                        line: seq_line(expected),
                        expected,
                        found: *first,
                    }
                });
            }
            let link = match &previous {
                Some((seq, hash)) => Some((*seq, hash.clone())),
                None if *first == 1 => None,
                None => Some((first - 1, first_prev(&bytes, *first)?)),
            };
            let log = wal::verify_segment(link.as_ref().map(|(s, h)| (*s, h.as_str())), &bytes)?;
            if log.entries.is_empty() && i + 1 < segments.len() {
                return Err(WalFault::Unparsable {
                    line: seq_line(*first),
                    why: format!("{name} is empty, yet later segments follow it"),
                });
            }
            chain.segments.push(SegmentSummary {
                segment: name.clone(),
                first: *first,
                records: log.entries.len() as u64,
            });
            if let Some(last) = log.entries.last() {
                previous = Some((last.seq, last.hash.clone()));
            } else if let Some(link) = link {
                previous = Some(link);
            }
            chain.entries.extend(log.entries);
        }
        Ok(chain)
    }
}

impl Evidence<'_> {
    /// The evidence log read across segments and verified: every segment from the first with
    /// `all` (`evidence verify --all`, `evidence list`), else the newest two — the current one
    /// and the link into it from the one before (`evidence verify`). Never on a hot path.
    pub fn chain(&self, all: bool) -> Result<EvidenceChain, WalFault> {
        let _guard = self
            .store
            .lock_log_shared(&self.store.layout.evidence_lock())
            .map_err(unreadable)?;
        self.store.evidence_chain_held(all)
    }

    /// Every evidence entry across every segment, verified; or the first fault.
    pub fn entries(&self) -> Result<Vec<WalEntry>, WalFault> {
        self.chain(true).map(|chain| chain.entries)
    }
}
