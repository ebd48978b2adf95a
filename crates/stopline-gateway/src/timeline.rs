//! A drill's view of the gateway's own timing (where a stop's time to first rejection
//! goes): when each request reached its handler and when its answer was ready, keyed by the
//! caller's numeric `x-request-id`, and when each changed view was swapped in and its waiters
//! woken.
//!
//! It is off unless an in-process drill turns it on ([`crate::RunningGateway::timeline`]);
//! `stopline serve` never does. Off, it costs one relaxed atomic load per request and per view
//! change. The marks are [`Instant`]s, comparable with the drill's own, because the drill's
//! gateway runs in its process.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// One moment the gateway noted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mark {
    /// The request with this `x-request-id` reached its handler (its head was read).
    Received {
        /// The caller's request id.
        request: u64,
        /// When.
        at: Instant,
    },
    /// The handler's answer to that request was ready (hyper writes it next).
    Answered {
        /// The caller's request id.
        request: u64,
        /// When.
        at: Instant,
        /// Its HTTP status.
        status: u16,
    },
    /// A changed view was swapped in (`stored`) and the waiters it concerns were woken
    /// (`woke`, after the scan).
    View {
        /// When the view was stored: from here every new judgment reads it.
        stored: Instant,
        /// When every concerned waiter had been woken.
        woke: Instant,
        /// Active latches in the new view.
        latches: usize,
        /// Waiters woken.
        woken: usize,
    },
}

/// The marks of one gateway, while turned on.
#[derive(Debug, Default)]
pub struct Timeline {
    on: AtomicBool,
    marks: Mutex<Vec<Mark>>,
}

impl Timeline {
    /// Forget every mark and start noting.
    pub fn start(&self) {
        self.lock().clear();
        self.on.store(true, Ordering::SeqCst);
    }

    /// Stop noting; every mark since [`Timeline::start`].
    pub fn take(&self) -> Vec<Mark> {
        self.on.store(false, Ordering::SeqCst);
        std::mem::take(&mut *self.lock())
    }

    /// Whether marks are being noted.
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Note `mark` (when on).
    pub fn mark(&self, mark: Mark) {
        if self.is_on() {
            self.lock().push(mark);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Mark>> {
        self.marks.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The numeric `x-request-id` of a request, if it has one.
pub fn request_id(headers: &hyper::HeaderMap) -> Option<u64> {
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_kept_only_while_on() {
        let timeline = Timeline::default();
        let at = Instant::now();
        timeline.mark(Mark::Received { request: 1, at });
        timeline.start();
        timeline.mark(Mark::Received { request: 2, at });
        assert_eq!(timeline.take(), vec![Mark::Received { request: 2, at }]);
        timeline.mark(Mark::Received { request: 3, at });
        assert!(timeline.take().is_empty());
        let mut headers = hyper::HeaderMap::new();
        assert_eq!(request_id(&headers), None);
        headers.insert(
            "x-request-id",
            hyper::header::HeaderValue::from_static("42"),
        );
        assert_eq!(request_id(&headers), Some(42));
        headers.insert("x-request-id", hyper::header::HeaderValue::from_static("a"));
        assert_eq!(request_id(&headers), None);
    }
}
