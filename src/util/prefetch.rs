//! Cache prefetch hints for the loop's batches.
//!
//! A loop that fires thousands of due timeouts touches a different flow for
//! each: a flow that has waited for milliseconds is no longer in the cache,
//! and reaching its current step takes a chain of dependent loads (slot,
//! flow, frame buffer, what the frame points to, the flow's state). Run one after
//! the other, every load of every chain waits for memory. The loop
//! therefore looks a few entries ahead and asks the processor to fetch the
//! next flows' parts while the current one runs (see
//! `Core::look_ahead` and the engine's `Scheduler::prefetch_timeout`). The same was tried on the inbox (a non-loop
//! thread completing a million waiting steps) and left out: its messages
//! come for flows in about the order they were created, which the
//! processor's own prefetcher already follows, and it measured no gain.

/// Asks the processor to bring the cache lines of `*p` (`lines` of them,
/// 64 bytes each, from `p` on) into the cache. A hint only: it never
/// faults, whatever `p` is; a no-op on targets other than x86_64.
#[inline(always)]
pub(crate) fn prefetch<T: ?Sized>(p: *const T, lines: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let p = p.cast::<i8>();
        for i in 0..lines {
            // `wrapping_add`: the address is only a hint and is never
            // dereferenced, so it need not stay inside one object.
            let at = p.wrapping_add(i * 64);
            // SAFETY: PREFETCHT0 (SSE, part of the x86_64 baseline) reads
            // nothing and cannot fault: an invalid or unmapped address is
            // ignored by the processor.
            unsafe { core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(at) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (p, lines);
    }
}

#[cfg(test)]
mod tests {
    use super::prefetch;

    #[test]
    fn a_hint_never_faults() {
        let v = [1u64; 32];
        prefetch(&v, 4);
        // Addresses that must not be read: null, unmapped, past the end.
        prefetch(std::ptr::null::<u8>(), 2);
        prefetch(usize::MAX as *const u8, 2);
        prefetch(v.as_ptr().wrapping_add(1 << 40), 1);
        assert_eq!(v.iter().sum::<u64>(), 32);
    }
}
