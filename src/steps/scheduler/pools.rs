//! Giving back what a burst left in the loop's pools.
//!
//! Finished flows, closed wait tokens and frames' emptied `Resources` are
//! kept for reuse up to the peak number of flows alive at once, so a burst of flows that end together
//! frees nothing on its way and the next burst allocates nothing, in the
//! same memory order. (Freed and allocated again, a million flows came
//! back from the allocator more scattered each time: a burst of a million
//! waiting flows completed from another thread ran about twice as slow by
//! its fifth round on the same loops as on new ones.)
//!
//! What is beyond `POOL_KEEP` is given back once the loop has been quiet
//! for `POOL_DECAY` (as allocators let freed memory decay before they
//! return it), a batch per turn, so new work never waits for more than
//! one batch of frees. A turn is quiet when it begins with nothing to run.
//! A loop that is woken for its work (messages, I/O, timers) is quiet at
//! the start of most turns, so it gives the excess back even while it
//! serves; one that always has work queued when a turn begins (flows that
//! keep yielding) keeps its pools, never more than its peak. `TestTool`
//! never trims: its pools grow to the peak of the test.

use super::Scheduler;
use crate::tool::Trim;
use std::time::Duration;

/// Pooled flows (and tokens) a quiet loop keeps.
const POOL_KEEP: usize = 65_536;
/// Pooled flows and tokens freed per turn beyond `POOL_KEEP`.
const TRIM_BATCH: usize = 1024;
/// How long a loop must have been quiet before it frees pool entries
/// beyond `POOL_KEEP`.
const POOL_DECAY: Duration = Duration::from_secs(10);

/// The limits `trim_pools` works with (the constants above; tests make
/// them small).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolLimits {
    pub keep: usize,
    pub batch: usize,
    pub decay: Duration,
}

impl Default for PoolLimits {
    fn default() -> Self {
        PoolLimits {
            keep: POOL_KEEP,
            batch: TRIM_BATCH,
            decay: POOL_DECAY,
        }
    }
}

impl Scheduler {
    /// For a turn that began with nothing to run: frees a batch of the
    /// pool entries beyond the keep once the loop has been quiet for the
    /// decay, and says when to come back. The quiet period starts at the
    /// first quiet turn that finds an excess, and ends with a busy turn or
    /// when the excess is gone (freed, or taken by new flows).
    pub(crate) fn trim_pools(&mut self) -> Trim {
        let PoolLimits { keep, batch, decay } = self.pool_limits;
        let excess = |s: &Self| {
            s.pool.len() > keep || s.tokens.len() > keep || s.spare_resources.len() > keep
        };
        if !excess(self) {
            self.idle_since = None;
            return Trim::Nothing;
        }
        let now = self.core.now;
        let since = *self.idle_since.get_or_insert(now);
        let due = since.checked_add(decay).unwrap_or(since);
        if now < due {
            return Trim::At(due);
        }
        for _ in 0..self.pool.len().saturating_sub(keep).min(batch) {
            if let Some(f) = self.pool.pop() {
                self.discard(f);
            }
        }
        let left = self.tokens.len().saturating_sub(batch).max(keep);
        self.tokens.truncate(left);
        let left = self.spare_resources.len().saturating_sub(batch).max(keep);
        self.spare_resources.truncate(left);
        if excess(self) {
            Trim::More
        } else {
            self.idle_since = None;
            Trim::Nothing
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steps::external::WaitToken;
    use crate::steps::scheduler::FlowKey;
    use crate::tool::Engine;
    use crate::{AsyncSteps, AsyncTool, ExternalHandle};
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    /// A loop whose pools hold `n` flows and `n` tokens, as after a burst
    /// of `n` flows that waited at once.
    fn after_burst(n: usize) -> Scheduler {
        let mut s = Scheduler::new(Instant::now());
        s.peak_flows = n;
        let mut free = Vec::new();
        for _ in 0..n {
            s.pool.push(Box::default());
            let t = WaitToken::acquire(&mut Vec::new(), &s.core.inbox, FlowKey::default(), 0, 0);
            free.push(t);
        }
        s.tokens = free;
        s
    }

    #[test]
    fn a_quiet_loop_frees_the_excess_a_batch_per_turn_after_the_decay() {
        let n = POOL_KEEP + 4 * TRIM_BATCH + 100;
        let mut s = after_burst(n);
        let t0 = s.core.now;

        // Quiet, but not for long enough: nothing is freed, come back later.
        assert_eq!(s.trim_pools(), Trim::At(t0 + POOL_DECAY));
        s.core.now = t0 + POOL_DECAY - Duration::from_millis(1);
        assert_eq!(s.trim_pools(), Trim::At(t0 + POOL_DECAY));
        assert_eq!((s.pool.len(), s.tokens.len()), (n, n));

        // Work ran: the quiet period starts again.
        s.busy();
        assert_eq!(s.trim_pools(), Trim::At(s.core.now + POOL_DECAY));
        s.core.now += POOL_DECAY;

        // Then one batch per turn, down to `POOL_KEEP`.
        let mut turns = 0;
        loop {
            turns += 1;
            let before = s.pool.len();
            let r = s.trim_pools();
            assert_eq!(before - s.pool.len(), (before - POOL_KEEP).min(TRIM_BATCH));
            assert_eq!(s.tokens.len(), s.pool.len());
            if r == Trim::Nothing {
                break;
            }
            assert_eq!(r, Trim::More);
        }
        assert_eq!(turns, 5);
        assert_eq!((s.pool.len(), s.tokens.len()), (POOL_KEEP, POOL_KEEP));
        // The quiet period ended with the excess: a later one starts anew.
        assert_eq!(s.idle_since, None);
        assert_eq!(s.trim_pools(), Trim::Nothing);
    }

    #[test]
    fn an_excess_taken_by_new_flows_ends_the_quiet_period() {
        let mut s = after_burst(POOL_KEEP + 10);
        let t0 = s.core.now;
        assert_eq!(s.trim_pools(), Trim::At(t0 + POOL_DECAY));
        // New flows take pooled ones; the pools are within the keep again.
        s.pool.truncate(POOL_KEEP);
        s.tokens.truncate(POOL_KEEP);
        s.core.now = t0 + POOL_DECAY;
        assert_eq!(s.trim_pools(), Trim::Nothing);
        assert_eq!(s.idle_since, None);
        // A new excess later waits a whole decay, not what is left of the old one.
        s.pool.push(Box::default());
        assert_eq!(s.trim_pools(), Trim::At(s.core.now + POOL_DECAY));
    }

    #[test]
    fn pools_within_the_keep_are_left_alone() {
        let mut s = after_burst(100);
        s.core.now += POOL_DECAY * 2;
        assert_eq!(s.trim_pools(), Trim::Nothing);
        assert_eq!((s.pool.len(), s.tokens.len()), (100, 100));
        assert_eq!(s.idle_since, None);
    }

    /// Through `AsyncTool::iterate`, with small limits: a burst of 40 flows
    /// ends; the loop has nothing else to wait for, yet wakes when the
    /// decay is over (not at the 5 s `max_wait`) and frees the excess a
    /// batch per call, without blocking between batches. (Real time: the
    /// only bound is generous.)
    #[test]
    fn an_idle_async_tool_wakes_for_the_trim_and_frees_a_batch_per_turn() {
        let mut tool = AsyncTool::new().unwrap();
        tool.pool_limits = PoolLimits {
            keep: 10,
            batch: 4,
            decay: Duration::from_millis(20),
        };
        let handles: Arc<Mutex<Vec<ExternalHandle>>> = Arc::default();
        for _ in 0..40 {
            let mut root = AsyncSteps::new();
            let hs = handles.clone();
            root.add(move |s, ()| {
                hs.lock().unwrap().push(s.wait_external());
                Ok(())
            });
            root.execute(&mut tool);
        }
        tool.run_until_idle().unwrap();
        for h in std::mem::take(&mut *handles.lock().unwrap()) {
            h.success(()).unwrap();
        }
        tool.run_until_idle().unwrap();
        assert_eq!((tool.pool.len(), tool.tokens.len()), (40, 40));

        let start = Instant::now();
        // The first quiet turn starts the decay and sleeps until it is over.
        assert_eq!(tool.iterate(Some(Duration::from_secs(5))).unwrap(), 0);
        assert_eq!(tool.pool.len(), 40);
        assert!(
            start.elapsed() < Duration::from_secs(4),
            "slept to max_wait"
        );
        // Then a batch per turn, each turn returning at once while more is
        // left.
        let mut sizes = Vec::new();
        while tool.pool.len() > 12 {
            assert_eq!(tool.iterate(Some(Duration::from_secs(5))).unwrap(), 0);
            sizes.push(tool.pool.len());
        }
        assert!(start.elapsed() < Duration::from_secs(4), "a batch slept");
        // The last batch leaves the keep; that turn may sleep as usual.
        tool.iterate(Some(Duration::ZERO)).unwrap();
        sizes.push(tool.pool.len());
        assert_eq!(sizes, [36, 32, 28, 24, 20, 16, 12, 10]);
        assert_eq!(tool.tokens.len(), 10);
    }
}
