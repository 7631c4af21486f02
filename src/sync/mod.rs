//! Synchronization of flows (spec 1.11, 2.3–2.5): [`Mutex`], [`Throttle`]
//! and [`Limiter`], and the [`ISync`] protocol behind
//! [`Step::sync`](crate::Step::sync).
//!
//! All three are cheap handles (`Clone`, `Send`, `Sync`) on a shared,
//! lock-free core, usable from flows on any loop of a
//! [`Runtime`](crate::runtime::Runtime) at once. A flow that has to wait parks its
//! step (no thread blocks, no OS lock is held); the flow that frees a slot
//! hands it to a waiter, which resumes on its own loop: the oldest waiter
//! of the freeing flow's loop first, for a bounded run, then the oldest
//! waiter (cohort handover, see [`Handover`]).
//!
//! ```
//! use futoin_asyncsteps::{sync::Mutex, AsyncSteps, TestTool};
//!
//! let mut tool = TestTool::new();
//! let m = Mutex::new(1, None);
//! let mut root = AsyncSteps::new();
//! root.add(|s, ()| s.success((20,)));
//! // The critical section gets the incoming args; its result goes on.
//! root.sync(&m, |s, (v,): (i32,)| s.success((v + 1,)));
//! root.add(|s, (v,): (i32,)| s.success((v * 2,)));
//! let p = root.promise(&mut tool);
//! assert_eq!(tool.block_on::<(i32,)>(p).unwrap().0, 42);
//! ```

mod cohort;
mod gate;
mod in_place;
mod limiter;
mod mutex;
mod throttle;

pub use cohort::Handover;
pub use limiter::{Limiter, LimiterCounts, LimiterOptions};
pub use mutex::Mutex;
pub use throttle::Throttle;

use crate::args::{Args, FromArgs};
use crate::error::{Error, StepResult};
use crate::steps::def::{self, name_of, Exec, StepDef};
use crate::steps::external::ExternalHandle;
use crate::steps::hold::{Guard, Hold, HoldState, Place};
use crate::steps::step::Step;
use gate::{Gate, Node};
use std::sync::Arc;

/// The synchronization protocol (spec `ISync`): anything implementing it
/// can be passed to [`Step::sync`](crate::Step::sync).
///
/// `sync` runs inside the step that `Step::sync` added, with the args that
/// step received. It must eventually run `section` with those args (via
/// [`Section::add_to`]) or fail the step, and it is responsible for
/// undoing whatever it took when the step ends in any way: success, error
/// unwinding or cancel (values put on [`Step::stack`] are dropped then,
/// which makes an RAII guard the natural tool).
///
/// ```
/// use futoin_asyncsteps::sync::{ISync, Section};
/// use futoin_asyncsteps::{Args, AsyncSteps, Step, StepResult, TestTool};
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
///
/// /// Counts entries and lets everyone in.
/// #[derive(Clone, Default)]
/// struct Counter(Arc<AtomicUsize>);
///
/// impl ISync for Counter {
///     fn sync(&self, s: &mut Step<'_>, args: Args, section: Section) -> StepResult {
///         self.0.fetch_add(1, Ordering::Relaxed);
///         section.add_to(s, args);
///         Ok(())
///     }
/// }
///
/// let c = Counter::default();
/// let mut tool = TestTool::new();
/// let mut root = AsyncSteps::new();
/// root.sync(&c, |s, ()| s.success(("in".to_owned(),)));
/// let p = root.promise(&mut tool);
/// assert_eq!(tool.block_on::<(String,)>(p).unwrap().0, "in");
/// assert_eq!(c.0.load(Ordering::Relaxed), 1);
/// ```
pub trait ISync: Send + Sync + 'static {
    /// Runs `section` under this object's protection; see the trait docs.
    fn sync(&self, s: &mut Step<'_>, args: Args, section: Section) -> StepResult;
}

/// The protected step of a [`sync`](crate::Step::sync) call, handed to
/// [`ISync::sync`].
///
/// A section stays on its flow's thread (its closure need not be `Send`):
///
/// ```compile_fail
/// use futoin_asyncsteps::{sync::Section, Args};
/// fn send<T: Send>(_: T) {}
/// send(Section::new(|_, _: Args| Ok(())));
/// ```
pub struct Section {
    def: StepDef,
}

impl std::fmt::Debug for Section {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Section")
            .field("step", &(self.def.name())())
            .finish()
    }
}

impl Section {
    /// A section running `f` (for [`ISync`] implementations that wrap a
    /// section in another synchronization, as [`Limiter`] does).
    ///
    /// ```
    /// use futoin_asyncsteps::sync::{ISync, Mutex, Section};
    /// use futoin_asyncsteps::{Args, AsyncSteps, Step, StepResult, TestTool};
    ///
    /// /// Two mutexes, always taken in the same order.
    /// #[derive(Clone)]
    /// struct Both(Mutex, Mutex);
    ///
    /// impl ISync for Both {
    ///     fn sync(&self, s: &mut Step<'_>, args: Args, section: Section) -> StepResult {
    ///         let inner = self.1.clone();
    ///         // Inside the first mutex, take the second around `section`.
    ///         let outer = Section::new(move |s: &mut Step<'_>, a: Args| inner.sync(s, a, section));
    ///         self.0.sync(s, args, outer)
    ///     }
    /// }
    ///
    /// let both = Both(Mutex::new(1, None), Mutex::new(1, None));
    /// let mut tool = TestTool::new();
    /// let mut root = AsyncSteps::new();
    /// root.add(|s, ()| s.success((1,)));
    /// root.sync(&both, |s, (v,): (i32,)| s.success((v + 1,)));
    /// let p = root.promise(&mut tool);
    /// assert_eq!(tool.block_on::<(i32,)>(p).unwrap().0, 2);
    /// ```
    pub fn new<F, A>(f: F) -> Self
    where
        F: FnOnce(&mut Step<'_>, A) -> StepResult + 'static,
        A: FromArgs + 'static,
    {
        Self::named::<F, F, A>(f)
    }

    /// A section running `f`, named after `N` on `async_stack`.
    pub(crate) fn named<N: 'static, F, A>(f: F) -> Self
    where
        F: FnOnce(&mut Step<'_>, A) -> StepResult + 'static,
        A: FromArgs + 'static,
    {
        Section {
            def: StepDef {
                exec: Exec::Fn(def::once_named::<N, F, A>(f)),
                catch: None,
            },
        }
    }

    pub(crate) fn with_catch<F, A, C>(f: F, on_error: C) -> Self
    where
        F: FnOnce(&mut Step<'_>, A) -> StepResult + 'static,
        A: FromArgs + 'static,
        C: FnOnce(&mut Step<'_>, &Error) -> StepResult + 'static,
    {
        let mut section = Section::new(f);
        section.def.catch = Some(def::once_catch(on_error));
        section
    }

    /// The callback of a section without an error handler, to run in
    /// place (see `in_place`); the section itself otherwise.
    fn into_in_place(self) -> Result<crate::steps::inline::Callback, Section> {
        match self.def {
            StepDef {
                exec: Exec::Fn(f),
                catch: None,
            } => Ok(f),
            def => Err(Section { def }),
        }
    }

    /// Adds the section as a sub-step of `s` that receives `args`. Steps
    /// `s` added before it run first; the section still gets `args`.
    pub fn add_to(self, s: &mut Step<'_>, args: Args) {
        s.add_with_args(self.def, args);
    }
}

impl<'a> Step<'a> {
    /// Adds a step that runs `f` synchronized against `obj` (spec `sync`):
    /// `f` gets this step's incoming args, and its result args go on to the
    /// next step as if there were no critical section.
    ///
    /// ```
    /// use futoin_asyncsteps::{sync::Mutex, AsyncSteps, TestTool};
    /// let m = Mutex::new(1, None);
    /// let mut tool = TestTool::new();
    /// let mut root = AsyncSteps::new();
    /// let m2 = m.clone();
    /// root.add(move |s, ()| {
    ///     s.sync(&m2, |s, ()| s.success((1,)));
    ///     Ok(())
    /// });
    /// let p = root.promise(&mut tool);
    /// assert_eq!(tool.block_on::<(i32,)>(p).unwrap().0, 1);
    /// ```
    pub fn sync<S, F, A>(&mut self, obj: &S, f: F) -> &mut Self
    where
        S: ISync + Clone,
        F: FnOnce(&mut Step<'_>, A) -> StepResult + 'static,
        A: FromArgs + 'static,
    {
        let obj = obj.clone();
        self.push(StepDef {
            // The args stay in the register: the section in place takes
            // them from there.
            exec: Exec::Fn(def::once_named::<F, _, _>(move |s: &mut Step<'_>, ()| {
                in_place::sync_step(s, obj, f, name_of::<F>())
            })),
            catch: None,
        });
        self
    }

    /// [`sync`](Step::sync) with an error handler for the critical section
    /// (spec `sync(obj, step, err_handler)`).
    ///
    /// ```
    /// use futoin_asyncsteps::{sync::Mutex, AsyncSteps, Error, TestTool};
    ///
    /// let m = Mutex::new(1, None);
    /// let mut tool = TestTool::new();
    /// let mut root = AsyncSteps::new();
    /// root.add(move |s, ()| {
    ///     s.sync_catch(
    ///         &m,
    ///         |_, ()| Err(Error::with_info("Busy", "try later")),
    ///         // Runs with the mutex still held; its result goes on.
    ///         |s, e| s.success((e.code().to_owned(),)),
    ///     );
    ///     Ok(())
    /// });
    /// let p = root.promise(&mut tool);
    /// assert_eq!(tool.block_on::<(String,)>(p).unwrap().0, "Busy");
    /// ```
    pub fn sync_catch<S, F, A, C>(&mut self, obj: &S, f: F, on_error: C) -> &mut Self
    where
        S: ISync + Clone,
        F: FnOnce(&mut Step<'_>, A) -> StepResult + 'static,
        A: FromArgs + 'static,
        C: FnOnce(&mut Step<'_>, &Error) -> StepResult + 'static,
    {
        let section = Section::with_catch(f, on_error);
        self.push_sync::<S, F>(obj.clone(), section)
    }

    /// Adds the step that syncs `section` on `obj`, named after `N` (the
    /// section's callback type).
    fn push_sync<S: ISync, N: 'static>(&mut self, obj: S, section: Section) -> &mut Self {
        self.push(StepDef {
            exec: Exec::Fn(def::once_named::<N, _, _>(
                move |s: &mut Step<'_>, a: Args| obj.sync(s, a, section),
            )),
            catch: None,
        });
        self
    }
}

impl crate::steps::model::AsyncSteps {
    /// Adds a root-level step synchronized against `obj`; see
    /// [`Step::sync`](crate::Step::sync).
    pub fn sync<S, F, A>(&mut self, obj: &S, f: F) -> &mut Self
    where
        S: ISync + Clone,
        F: FnOnce(&mut Step<'_>, A) -> StepResult + Clone + Send + 'static,
        A: FromArgs + 'static,
    {
        let obj = obj.clone();
        self.add(move |s, ()| in_place::sync_step(s, obj, f, name_of::<F>()))
    }

    /// [`sync`](Self::sync) with an error handler for the critical section.
    pub fn sync_catch<S, F, A, C>(&mut self, obj: &S, f: F, on_error: C) -> &mut Self
    where
        S: ISync + Clone,
        F: FnOnce(&mut Step<'_>, A) -> StepResult + Clone + Send + 'static,
        A: FromArgs + 'static,
        C: FnOnce(&mut Step<'_>, &Error) -> StepResult + Clone + Send + 'static,
    {
        let obj = obj.clone();
        self.add(move |s, a: Args| obj.sync(s, a, Section::with_catch(f, on_error)))
    }
}

/// The shared core of one of this crate's sync objects: what the engine's
/// [`Hold`] gives back through ([`Guard`]: an admitted flow leaves, a
/// queued one gives its place up), and what `enter` needs of it.
pub(crate) trait HoldCore: Guard {
    /// Whether a flow already inside that enters again takes a slot like
    /// any entry (Throttle: spec 1.11.2 and 2.4 limit entries per period,
    /// nested ones too); else it passes straight through (Mutex
    /// reentrance).
    const COUNTS_REENTRY: bool = false;

    /// The object's kind, for error messages.
    fn what(&self) -> &'static str;
    /// The gate of this object.
    fn gate(&self) -> &Gate<ExternalHandle>;
    /// Whether a freed slot is passed on by cohort handover (a Mutex),
    /// so each loop keeps its waiters in a cohort; a Throttle's slots come
    /// with its periods, in arrival order.
    const HANDS_OVER: bool = false;

    /// How a freed slot is passed on (see `HANDS_OVER`).
    fn handover(&self) -> Handover {
        Handover::FIFO
    }
    /// A flow was admitted (`queued == false`) or queued on the loop
    /// running `s` (Throttle: make sure the period timer runs).
    fn entered(self: Arc<Self>, _s: &mut Step<'_>, _queued: bool) {}
}

/// At most this many emptied queue nodes are kept per thread (32 bytes
/// each: 2 MiB at most), for the next waiters of its loop. As for the
/// loop's other pools, the pool grows to the peak of waiters that left
/// (20,000 flows queued on one Mutex at once allocate no node the next
/// time), bounded like the branch lists a thread keeps.
const NODES_KEEP: usize = 65_536;

thread_local! {
    /// Queue nodes of waiters that have left, kept for the next ones: a
    /// contended `sync` allocates no node once the loop is warm.
    static NODES: std::cell::RefCell<Vec<Arc<Node<ExternalHandle>>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A queue node for a waiter that `resume` resumes (see `Node::reuse`).
fn new_node(resume: ExternalHandle) -> Arc<Node<ExternalHandle>> {
    // `try_with`: a thread being torn down makes one anew.
    let spare = NODES
        .try_with(|p| p.try_borrow_mut().ok().and_then(|mut p| p.pop()))
        .ok()
        .flatten();
    Node::reuse(spare, resume)
}

/// A dead node a handover skipped: kept for the next waiters of this
/// thread's loop when nobody else holds it (see [`Place::recycle`]).
fn spare_node(n: Arc<Node<ExternalHandle>>) {
    n.recycle();
}

/// A queued flow's node is its place in the queue.
impl Place for Node<ExternalHandle> {
    fn is_granted(&self) -> bool {
        Node::is_granted(self)
    }
    fn cancel(&self) -> bool {
        Node::cancel(self)
    }
    fn recycle(self: Arc<Self>) {
        // Kept only when no other thread holds it (a cancelled node may
        // stay queued until a handover skips it; `reuse` checks again).
        if Arc::strong_count(&self) == 1 {
            let _ = NODES.try_with(|p| {
                if let Ok(mut p) = p.try_borrow_mut() {
                    if p.len() < NODES_KEEP {
                        p.push(self);
                    }
                }
            });
        }
    }
}

/// The stake in the object behind `core` of a flow of loop `home`.
fn hold_of<C: HoldCore>(core: Arc<C>, held: bool, home: u64) -> Hold {
    Hold::new(id_of(&core), core, held, home)
}

/// The id of the loop running `s` (`Hold::new`'s `home`).
fn home_of(s: &Step<'_>) -> u64 {
    s.sched.core.inbox.id
}

/// The identity of a sync object: the address of its core, as in
/// [`Hold::id`].
fn id_of<C>(core: &Arc<C>) -> usize {
    Arc::as_ptr(core) as *const () as usize
}

/// Resumes a granted waiter on its own loop. A waiter whose step ended in
/// the meantime refuses the handle; its `Hold` then sees the grant on drop
/// and gives the slot back, so nothing is lost. A grant the waiter took
/// is counted as a handover of this thread (see [`handovers`]); a refused
/// one is not (the slot goes on from the waiter's `Hold`, counted there).
fn resume(h: ExternalHandle) {
    let i = usize::from(!h.is_local());
    if h.success(()).is_ok() {
        let _ = HANDOVERS.try_with(|c| {
            let mut n = c.get();
            n[i] += 1;
            c.set(n);
        });
    }
}

thread_local! {
    /// Slots handed to waiters by this thread: to a waiter on this
    /// thread's loop, and to one on another thread's.
    static HANDOVERS: std::cell::Cell<[u64; 2]> = const { std::cell::Cell::new([0; 2]) };
}

/// Slots of sync objects (`Mutex`, `Throttle`, `Limiter`) this thread has
/// handed to queued waiters so far: (to a waiter on this thread's own
/// loop, to one on another loop). A runtime's loop publishes them in its
/// `LoopStats`: a handover that crosses loops resumes its waiter through
/// the other loop's inbox.
pub(crate) fn handovers() -> (u64, u64) {
    HANDOVERS
        .try_with(|c| c.get())
        .map_or((0, 0), |n| (n[0], n[1]))
}

/// The shared body of Mutex and Throttle `sync`: Mutex reentrance, fast
/// path, deadlock check, then a wait step that queues.
///
/// `deadlock_check`: whether a flow whose ancestors hold every slot must
/// be refused (Mutex) rather than queued (Throttle frees slots by time).
fn enter<C: HoldCore>(
    core: Arc<C>,
    s: &mut Step<'_>,
    args: Args,
    section: Section,
    deadlock_check: bool,
) -> StepResult {
    let id = id_of(&core);
    let what = core.what();
    // A frameless section running in this step keeps its hold in the
    // loop's register: in the frame, the checks below see it.
    s.frame_here();
    let engine_sync = std::mem::take(&mut s.out_mut().engine_sync);
    if s.has_pending_hold(id) {
        return Err(Error::internal(format!(
            "{what}: this step already waits for the same object; sync on it once per step"
        )));
    }
    let (own, ancestors) = s.sync_holds(id);
    if own && !C::COUNTS_REENTRY {
        // Re-entering a Mutex this flow (strand) already holds: pass
        // through. (A Throttle's re-entry is one more entry: it goes on.)
        section.add_to(s, args);
        return Ok(());
    }
    let gate = core.gate();
    if gate.try_enter() {
        core.clone().entered(s, false);
        let hold = hold_of(core, true, home_of(s));
        if engine_sync && s.may_merge_section() {
            match section.into_in_place() {
                Ok(f) => {
                    // The Limiter's section (its Throttle around the user's
                    // section) runs in the engine's sync step; see
                    // `in_place`.
                    s.run_in_place(hold, f.name());
                    *s.args() = args;
                    return f.call(s);
                }
                Err(section) => {
                    s.add_hold(hold);
                    section.add_to(s, args);
                    return Ok(());
                }
            }
        }
        s.add_hold(hold);
        section.add_to(s, args);
        return Ok(());
    }
    if deadlock_check && ancestors >= gate.max() as usize {
        return Err(Error::internal(format!(
            "{what}: deadlock: a parallel branch waits for a lock that only its own \
             ancestors hold (they release it after the branch ends)"
        )));
    }
    let home = home_of(s);
    s.add_hold(hold_of(core.clone(), false, home));
    // Only the core is kept (one word: the closure stays in place); the
    // hold is found by its id.
    s.add(move |s, ()| {
        let lost = || Error::internal("sync(): the wait step lost its sync step");
        let id = id_of(&core);
        s.parent_hold(id).ok_or_else(lost)?;
        let what = core.what();
        let mut node = None;
        let r = core.gate().enter_or_queue(|| {
            let n = new_node(s.wait_external());
            node = Some(n.clone());
            n
        });
        if let Some(n) = node.as_ref().filter(|_| C::HANDS_OVER) {
            cohort::queued(home_of(s), id, n);
        }
        // Record the outcome first, so nothing after it can lose a slot.
        let h = s.parent_hold(id).ok_or_else(lost)?;
        h.set_state(match r {
            gate::Enter::Now => HoldState::Held,
            gate::Enter::Queued => HoldState::Queued(node.expect("queued with a node")),
            gate::Enter::Rejected => {
                return Err(Error::with_info(
                    crate::error::codes::DEFENSE_REJECTED,
                    format!("{what}: the queue is full"),
                ))
            }
        });
        core.entered(s, r == gate::Enter::Queued);
        Ok(())
    });
    if args.is_empty() {
        // The wait step ends with no args (an implicit success, or the
        // grant's `success(())`): the section gets none without a step
        // forwarding them.
        s.push(section.def);
    } else {
        section.add_to(s, args);
    }
    Ok(())
}
