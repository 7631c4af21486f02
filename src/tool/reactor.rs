//! The loop's readiness table: which sources are registered with the mio
//! registry, who (if anyone) waits on each, and readiness that came while
//! nobody waited. Who waits is the engine's business: a waiter is a value
//! of the engine's (`W`) that comes back when its wait is answered.
//!
//! A source is registered on its first wait and stays registered (under
//! one token, edge-triggered) until the step that owns it on the stack
//! ends; then it is deregistered. Waiting again costs no syscall. An event
//! that arrives while no step waits is kept and completes the next wait at
//! once, so an edge is never lost between two waits. The `io::net` helpers
//! also record when an operation found a source drained (it would block,
//! or a read came back short), and wait first, without a system call,
//! until an event says it is worth trying again.

use slotmap::{new_key_type, Key, KeyData, SlotMap};

new_key_type! {
    /// Identifies a source registered with the loop's reactor.
    pub(crate) struct IoKey;
}

/// What a readiness wait saw: which of a source's readiness states an
/// event (or the readiness kept since) reported. A step's
/// [`wait_io`](crate::Step::wait_io) completes with it as its result args.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Ready {
    /// Reading will not block (data, EOF or an error is there).
    pub readable: bool,
    /// Writing will not block.
    pub writable: bool,
    /// The peer closed its writing half (a read gives EOF after the data).
    pub read_closed: bool,
    /// The writing half is closed (writes fail).
    pub write_closed: bool,
    /// The source reports an error (read it with `take_error`).
    pub error: bool,
}

/// One registered source.
struct Reg<W> {
    /// The interest it is registered with.
    interest: mio::Interest,
    /// Who waits, and for what.
    waiter: Option<Waiter<W>>,
    /// Readiness seen while no step waited for it.
    pending: Bits,
    /// `READABLE` (`WRITABLE`): the last read (write) found nothing to
    /// read (no room to write) and no readable (writable) event came
    /// since: the next attempt in that direction would block, so the
    /// helpers wait first.
    drained: u8,
    /// The bits of `pending` that state a passing condition (see
    /// [`Bits::passing`]): the next wait handed them uses them up. (Not
    /// an operation that found the source drained: a read that came back
    /// short leaves a socket error pending.)
    passing: u8,
}

/// Readiness as bits: the reactor's working form of [`Ready`] (one mask
/// test where the struct takes a test per field).
#[derive(Clone, Copy, Default)]
struct Bits(u8);

const READABLE: u8 = 1;
const WRITABLE: u8 = 2;
const READ_CLOSED: u8 = 4;
const WRITE_CLOSED: u8 = 8;
const ERROR: u8 = 16;
/// Urgent (out-of-band) data: mio reports it as readable too.
const PRIORITY: u8 = 32;

impl Bits {
    fn of(ev: &mio::event::Event) -> Self {
        let mut b = 0;
        for (on, bit) in [
            (ev.is_readable(), READABLE),
            (ev.is_writable(), WRITABLE),
            (ev.is_read_closed(), READ_CLOSED),
            (ev.is_write_closed(), WRITE_CLOSED),
            (ev.is_error(), ERROR),
            (ev.is_priority(), PRIORITY),
        ] {
            if on {
                b |= bit;
            }
        }
        Bits(b)
    }

    /// The bits of an event that state a passing condition rather than a
    /// lasting one: a socket error (`SO_ERROR`) is cleared once an
    /// operation reports it (a UDP socket goes on after an ICMP "port
    /// unreachable"), and mio reports such an error as write-closed too.
    /// A hang-up (read-closed with it) lasts: it answers every later wait.
    fn passing(self) -> u8 {
        if self.0 & ERROR == 0 {
            0
        } else if self.0 & READ_CLOSED == 0 {
            ERROR | WRITE_CLOSED
        } else {
            ERROR
        }
    }

    fn ready(self) -> Ready {
        Ready {
            readable: self.0 & READABLE != 0,
            writable: self.0 & WRITABLE != 0,
            read_closed: self.0 & READ_CLOSED != 0,
            write_closed: self.0 & WRITE_CLOSED != 0,
            error: self.0 & ERROR != 0,
        }
    }

    /// Whether these bits answer a wait for `i` (closed and error states
    /// answer any wait: the operation will not block, it will fail or
    /// end).
    fn answers(self, i: mio::Interest) -> bool {
        let mut want = ERROR;
        if i.is_readable() {
            want |= READABLE | READ_CLOSED;
        }
        if i.is_priority() {
            want |= PRIORITY | READ_CLOSED;
        }
        if i.is_writable() {
            want |= WRITABLE | WRITE_CLOSED;
        }
        self.0 & want != 0
    }
}

/// The edge bits of `i`: `READABLE`, `WRITABLE` and/or `PRIORITY`.
fn edges(i: mio::Interest) -> u8 {
    let mut e = 0;
    if i.is_readable() {
        e |= READABLE;
    }
    if i.is_priority() {
        e |= PRIORITY;
    }
    if i.is_writable() {
        e |= WRITABLE;
    }
    e
}

/// Who waits on a source, and for what.
#[derive(Clone, Copy)]
struct Waiter<W> {
    who: W,
    interest: mio::Interest,
}

/// A wait that is over: who waited, and what it saw.
pub(crate) struct Done<W> {
    pub who: W,
    seen: Bits,
}

impl<W> Done<W> {
    /// What the wait saw.
    pub(crate) fn ready(&self) -> Ready {
        self.seen.ready()
    }
}

/// The registry and the registered sources of one loop; `W` says who
/// waits.
pub(crate) struct Reactor<W> {
    registry: mio::Registry,
    regs: SlotMap<IoKey, Reg<W>>,
}

/// What a wait found when it started.
pub(crate) enum Begin {
    /// Readiness came earlier: the caller posts a `poke` for the next turn
    /// (if the step ends before that, the readiness stays kept).
    Soon,
    /// The step waits for an event.
    Wait,
}

fn token(k: IoKey) -> mio::Token {
    // The ffi value packs the slot's index and version in 64 bits; a
    // 32-bit `usize` would drop the version (stale tokens could then hit
    // a reused slot), so this is only built where `usize` is 64 bits.
    const _: () = assert!(usize::BITS >= 64, "I/O tokens need a 64-bit usize");
    mio::Token(k.data().as_ffi() as usize)
}

/// Hands the kept readiness to the waiter of `r` if it answers it. A
/// completed wait for `i` uses up the readable or writable edge and any
/// passing error ([`Bits::passing`]); closed states stay: they hold for
/// every later wait too.
fn take_for<W: Copy>(r: &mut Reg<W>) -> Option<Done<W>> {
    let w = r.waiter?;
    if !r.pending.answers(w.interest) {
        return None;
    }
    let seen = r.pending;
    r.pending.0 &= !(edges(w.interest) | r.passing);
    r.passing = 0;
    r.waiter = None;
    Some(Done { who: w.who, seen })
}

impl<W: Copy> Reactor<W> {
    pub(crate) fn new(registry: mio::Registry) -> Self {
        Reactor {
            registry,
            regs: SlotMap::with_key(),
        }
    }

    /// Registered sources.
    pub(crate) fn len(&self) -> usize {
        self.regs.len()
    }

    /// Registers `src` (on its first wait).
    pub(crate) fn register<S: mio::event::Source + ?Sized>(
        &mut self,
        src: &mut S,
        interest: mio::Interest,
    ) -> std::io::Result<IoKey> {
        let k = self.regs.insert(Reg {
            interest,
            waiter: None,
            pending: Bits::default(),
            drained: 0,
            passing: 0,
        });
        // A user source's `register` may panic: the slot must not stay.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.registry.register(src, token(k), interest)
        }));
        match r {
            Ok(Ok(())) => Ok(k),
            Ok(Err(e)) => {
                self.regs.remove(k);
                Err(e)
            }
            Err(p) => {
                self.regs.remove(k);
                std::panic::resume_unwind(p)
            }
        }
    }

    /// True when `k` is still registered (its owner has not ended).
    pub(crate) fn contains(&self, k: IoKey) -> bool {
        self.regs.contains_key(k)
    }

    /// True when `k` is registered with (at least) `interest`.
    pub(crate) fn covers(&self, k: IoKey, interest: mio::Interest) -> bool {
        self.regs
            .get(k)
            .is_some_and(|r| r.interest.add(interest) == r.interest)
    }

    /// Widens the registration of `k` to include `interest` if needed.
    pub(crate) fn widen<S: mio::event::Source + ?Sized>(
        &mut self,
        k: IoKey,
        src: &mut S,
        interest: mio::Interest,
    ) -> std::io::Result<()> {
        let Some(r) = self.regs.get_mut(k) else {
            return Ok(());
        };
        let want = r.interest.add(interest);
        if want != r.interest {
            self.registry.reregister(src, token(k), want)?;
            r.interest = want;
        }
        Ok(())
    }

    /// `who` starts waiting on `k` for `interest`. `Err`: someone waits
    /// on this source already.
    pub(crate) fn begin(&mut self, k: IoKey, who: W, interest: mio::Interest) -> Result<Begin, ()> {
        let Some(r) = self.regs.get_mut(k) else {
            return Err(());
        };
        if r.waiter.is_some() {
            return Err(());
        }
        r.waiter = Some(Waiter { who, interest });
        if r.pending.answers(interest) {
            return Ok(Begin::Soon);
        }
        Ok(Begin::Wait)
    }

    /// The turn after a `Begin::Soon`: completes the waiter with the kept
    /// readiness if it still waits.
    pub(crate) fn poke(&mut self, k: IoKey) -> Option<Done<W>> {
        take_for(self.regs.get_mut(k)?)
    }

    /// True while someone waits on `k`.
    pub(crate) fn has_waiter(&self, k: IoKey) -> bool {
        self.regs.get(k).is_some_and(|r| r.waiter.is_some())
    }

    /// The waiter `is_it` recognises ended (any way): it waits no more.
    pub(crate) fn end_wait(&mut self, k: IoKey, is_it: impl FnOnce(&W) -> bool) {
        if let Some(r) = self.regs.get_mut(k) {
            if r.waiter.as_ref().is_some_and(|w| is_it(&w.who)) {
                r.waiter = None;
            }
        }
    }

    /// The owner of the source ends: deregister it (the source is still
    /// alive) and forget it.
    pub(crate) fn deregister<S: mio::event::Source + ?Sized>(&mut self, k: IoKey, src: &mut S) {
        if self.regs.remove(k).is_some() {
            // A source whose fd is already closed is gone from epoll anyway.
            let _ = self.registry.deregister(src);
        }
    }

    /// Forgets `k` without touching the source (it is gone).
    pub(crate) fn forget(&mut self, k: IoKey) {
        self.regs.remove(k);
    }

    /// An event: who waited for it, with what it saw, or `None` (the
    /// readiness is kept for the next wait, or the token is stale).
    pub(crate) fn event(&mut self, ev: &mio::event::Event) -> Option<Done<W>> {
        let k = IoKey::from(KeyData::from_ffi(ev.token().0 as u64));
        let r = self.regs.get_mut(k)?;
        let seen = Bits::of(ev);
        if seen.answers(mio::Interest::READABLE) {
            r.drained &= !READABLE;
        }
        if seen.answers(mio::Interest::WRITABLE) {
            r.drained &= !WRITABLE;
        }
        r.pending.0 |= seen.0;
        // A lasting bit this event brings is no longer passing.
        r.passing = (r.passing & !seen.0) | seen.passing();
        take_for(r)
    }

    /// An operation on `k` found it not ready for `interest` now (it
    /// would block, or a read came back short): readiness kept from
    /// earlier is stale, and until an event for that direction arrives,
    /// [`worth_trying`](Self::worth_trying) says no. Edge-triggered
    /// polling reports every later arrival of data (or room) as a new
    /// event, so no wake-up is lost.
    pub(crate) fn drained(&mut self, k: IoKey, interest: mio::Interest) {
        let Some(r) = self.regs.get_mut(k) else {
            return;
        };
        let e = edges(interest);
        r.pending.0 &= !e;
        r.drained |= e;
    }

    /// False when an operation for `interest` on `k` would block: the
    /// last one found the source drained and no event for it came since.
    /// True for a source not registered (nothing is known).
    pub(crate) fn worth_trying(&self, k: IoKey, interest: mio::Interest) -> bool {
        let Some(r) = self.regs.get(k) else {
            return true;
        };
        r.pending.answers(interest) || edges(interest) & !r.drained != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mio::Interest;

    #[test]
    fn closed_and_error_states_answer_any_wait_edges_only_their_own() {
        let cases = [
            (READABLE, [true, false]),
            (WRITABLE, [false, true]),
            (READ_CLOSED, [true, false]),
            (WRITE_CLOSED, [false, true]),
            (ERROR, [true, true]),
        ];
        for (bit, [r, w]) in cases {
            let b = Bits(bit);
            assert_eq!(b.answers(Interest::READABLE), r, "bit {bit}");
            assert_eq!(b.answers(Interest::WRITABLE), w, "bit {bit}");
            assert!(b.answers(Interest::READABLE | Interest::WRITABLE));
        }
        assert!(!Bits(0).answers(Interest::READABLE | Interest::WRITABLE));
    }

    /// Priority data answers a priority wait and uses up only its own
    /// edge: ordinary data neither answers it (a loop of priority waits
    /// would spin on it) nor is used up by it (a readable wait would miss
    /// its edge).
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn priority_data_answers_priority_waits_alone_and_uses_up_its_own_edge() {
        assert!(Bits(PRIORITY | READABLE).answers(Interest::PRIORITY));
        assert!(!Bits(READABLE).answers(Interest::PRIORITY));
        assert!(Bits(READ_CLOSED).answers(Interest::PRIORITY));
        assert!(!Bits(PRIORITY).answers(Interest::READABLE));
        let mut reg = Reg {
            interest: Interest::READABLE | Interest::PRIORITY,
            waiter: Some(Waiter {
                who: (0, 1, false),
                interest: Interest::PRIORITY,
            }),
            pending: Bits(PRIORITY | READABLE),
            drained: 0,
            passing: 0,
        };
        assert!(take_for(&mut reg).is_some());
        assert_eq!(reg.pending.0, READABLE, "the readable edge stays");
    }

    #[test]
    fn bits_become_the_same_ready_fields() {
        let r = Bits(READABLE | WRITE_CLOSED | ERROR).ready();
        let want = Ready {
            readable: true,
            write_closed: true,
            error: true,
            ..Ready::default()
        };
        assert_eq!(r, want);
        assert_eq!(Bits(0).ready(), Ready::default());
    }

    #[test]
    fn a_completed_wait_uses_up_its_edge_and_keeps_the_closed_state() {
        let mut reg = Reg {
            interest: Interest::READABLE | Interest::WRITABLE,
            waiter: Some(Waiter {
                who: (0, 7, true),
                interest: Interest::READABLE,
            }),
            pending: Bits(READABLE | WRITABLE | READ_CLOSED),
            drained: 0,
            passing: 0,
        };
        let done = take_for(&mut reg).expect("the kept readiness answers");
        assert_eq!((done.who.1, done.who.2), (7, true));
        let seen = done.ready();
        assert!(seen.readable && seen.writable && seen.read_closed);
        assert_eq!(reg.pending.0, WRITABLE | READ_CLOSED);
        assert!(reg.waiter.is_none());
    }

    #[test]
    fn a_bare_error_passes_with_the_wait_it_answers_a_hang_up_stays() {
        // (event bits, what is left once one wait took them)
        let cases = [
            // An ICMP error on a UDP socket: mio says error + write-closed.
            (ERROR | WRITE_CLOSED, 0),
            // (A read wait leaves the writable edge.)
            (ERROR | WRITE_CLOSED | WRITABLE, WRITABLE),
            // A reset: the hang-up closes both ways for good.
            (
                ERROR | READ_CLOSED | WRITE_CLOSED,
                READ_CLOSED | WRITE_CLOSED,
            ),
            (READ_CLOSED | WRITE_CLOSED, READ_CLOSED | WRITE_CLOSED),
        ];
        for (bits, left) in cases {
            let mut reg = Reg {
                interest: Interest::READABLE,
                waiter: Some(Waiter {
                    who: (0, 1, true),
                    interest: Interest::READABLE,
                }),
                pending: Bits(bits),
                drained: 0,
                passing: Bits(bits).passing(),
            };
            let done = take_for(&mut reg).expect("answers");
            assert_eq!(done.seen.0, bits);
            assert_eq!((reg.pending.0, reg.passing), (left, 0), "bits {bits}");
        }
        // A lasting bit in a later event is no longer passing.
        let first = Bits(ERROR | WRITE_CLOSED).passing();
        let later = Bits(READ_CLOSED | WRITE_CLOSED);
        assert_eq!((first & !later.0) | later.passing(), ERROR);
    }
}
