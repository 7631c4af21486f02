//! Giving back what a burst left in the loop's pools.
//!
//! Finished flows and closed wait tokens are kept for reuse up to the peak
//! number of flows alive at once, so a burst of flows that end together
//! frees nothing on its way and the next burst allocates nothing, in the
//! same memory order. (Freed and allocated again, a million flows came
//! back from the allocator more scattered each time: a burst of a million
//! waiting flows completed from another thread ran about twice as slow by
//! its fifth round on the same loops as on new ones.)
//!
//! What is beyond `POOL_KEEP` is given back once the loop has been quiet
//! for `POOL_DECAY` (as allocators let freed memory decay before they
//! return it), a batch per turn, so new work never waits for more than
//! one batch of frees. "Quiet" means the loop found nothing to run when a
//! turn began; a loop that handles a message now and then is quiet most of
//! the time, one that always finds work is not, and keeps its pools.

use super::Scheduler;
use std::time::{Duration, Instant};

/// Pooled flows (and tokens) a quiet loop keeps.
pub(crate) const POOL_KEEP: usize = 65_536;
/// Pooled flows and tokens freed per turn beyond `POOL_KEEP`.
pub(crate) const TRIM_BATCH: usize = 1024;
/// How long a loop must have been quiet before it frees pool entries
/// beyond `POOL_KEEP`.
pub(crate) const POOL_DECAY: Duration = Duration::from_secs(10);

/// What a quiet turn should do about the pools (`Scheduler::trim_pools`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Trim {
    /// Nothing beyond `POOL_KEEP`: sleep as long as there is nothing else.
    Nothing,
    /// A batch was freed and more is left: come back without sleeping.
    More,
    /// Come back by then to start freeing.
    At(Instant),
}

impl Scheduler {
    /// A turn began with work to run: the loop is not quiet.
    #[inline]
    pub(crate) fn busy(&mut self) {
        self.idle_since = None;
    }

    /// For a turn that began with nothing to run: frees a batch of the
    /// pool entries beyond `POOL_KEEP` once the loop has been quiet for
    /// `POOL_DECAY`, and says when to come back.
    pub(crate) fn trim_pools(&mut self) -> Trim {
        let excess = |s: &Self| s.pool.len() > POOL_KEEP || s.tokens.len() > POOL_KEEP;
        if !excess(self) {
            return Trim::Nothing;
        }
        let since = *self.idle_since.get_or_insert(self.now);
        let due = since.checked_add(POOL_DECAY).unwrap_or(since);
        if self.now < due {
            return Trim::At(due);
        }
        for _ in 0..self.pool.len().saturating_sub(POOL_KEEP).min(TRIM_BATCH) {
            if let Some(f) = self.pool.pop() {
                self.discard(f);
            }
        }
        let keep = self.tokens.len().saturating_sub(TRIM_BATCH).max(POOL_KEEP);
        self.tokens.truncate(keep);
        if excess(self) {
            Trim::More
        } else {
            Trim::Nothing
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steps::result::WaitToken;
    use crate::tool::scheduler::FlowKey;

    /// A loop whose pools hold `n` flows and `n` tokens, as after a burst
    /// of `n` flows that waited at once.
    fn after_burst(n: usize) -> Scheduler {
        let mut s = Scheduler::new(Instant::now());
        s.peak_flows = n;
        let mut free = Vec::new();
        for _ in 0..n {
            s.pool.push(Box::default());
            free.push(WaitToken::acquire(
                &mut Vec::new(),
                &s.shared,
                FlowKey::default(),
                0,
                0,
            ));
        }
        s.tokens = free;
        s
    }

    #[test]
    fn a_quiet_loop_frees_the_excess_a_batch_per_turn_after_the_decay() {
        let n = POOL_KEEP + 4 * TRIM_BATCH + 100;
        let mut s = after_burst(n);
        let t0 = s.now;

        // Quiet, but not for long enough: nothing is freed, come back later.
        assert_eq!(s.trim_pools(), Trim::At(t0 + POOL_DECAY));
        s.now = t0 + POOL_DECAY - Duration::from_millis(1);
        assert_eq!(s.trim_pools(), Trim::At(t0 + POOL_DECAY));
        assert_eq!((s.pool.len(), s.tokens.len()), (n, n));

        // Work ran: the quiet period starts again.
        s.busy();
        assert_eq!(s.trim_pools(), Trim::At(s.now + POOL_DECAY));
        s.now += POOL_DECAY;

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
        assert_eq!(s.trim_pools(), Trim::Nothing);
    }

    #[test]
    fn pools_within_the_keep_are_left_alone() {
        let mut s = after_burst(100);
        s.now += POOL_DECAY * 2;
        assert_eq!(s.trim_pools(), Trim::Nothing);
        assert_eq!((s.pool.len(), s.tokens.len()), (100, 100));
        assert_eq!(s.idle_since, None);
    }
}
