//! A foreign root owned from Rust, and Rust state variables in a foreign
//! flow.

use super::boxes::{arena_of, Arena, Keeper};
use super::handles::ForeignParallel;
use super::trampolines::{
    add_step, exec_fn, exec_tramp, unhandled_tramp, CatchFn, ExecFn, StepSlot, UnhandledSlot,
};
use super::view::{c_string, ForeignSteps};
use crate::args::{FromArgs, IntoArgs};
use crate::cabi::types::*;
use crate::error::{Error, StepResult};
use parking_lot::Mutex;
use std::any::Any;
use std::ffi::c_void;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

/// A Rust state variable's value, as the C state holds it.
type VarCell = Box<dyn Any + Send>;

/// What `var_alloc` gets as `data`: makes the boxed cell (or NULL).
type Make<'x> = &'x mut dyn FnMut() -> *mut c_void;

unsafe extern "C" fn var_alloc(data: *mut c_void) -> *mut c_void {
    // SAFETY: `state_variable` passes a `Make` that lives for this call
    // (allocate runs inside the stateVariable call, if at all).
    let make = unsafe { &mut *(data as *mut Make<'_>) };
    make()
}

unsafe extern "C" fn var_free(_data: *mut c_void, v: *mut c_void) {
    if !v.is_null() {
        // A panicking Drop has nobody to report to.
        let _ = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: `v` is the `Box<VarCell>` `var_alloc` made; cleanup
            // runs once.
            drop(unsafe { Box::from_raw(v as *mut VarCell) })
        }));
    }
}

/// The Rust state variable `rust:<name>` of the flow behind `bsi`.
pub(super) fn state_variable<'x, T: Send + 'static>(
    bsi: *mut FutoInAsyncSteps,
    api: &FutoInAsyncStepsAPI,
    name: &str,
    init: impl FnOnce() -> T,
) -> Option<&'x mut T> {
    let sv = api.state_variable?;
    let name = c_string(&format!("rust:{name}"));
    let mut init = Some(init);
    let mut panic = None;
    let mut make = || match init.take() {
        Some(f) => match catch_unwind(AssertUnwindSafe(f)) {
            Ok(v) => Box::into_raw(Box::new(Box::new(v) as VarCell)).cast(),
            Err(p) => {
                panic = Some(p);
                std::ptr::null_mut()
            }
        },
        None => std::ptr::null_mut(),
    };
    let mut make: Make<'_> = &mut make;
    // SAFETY: a live handle (callers' contract: a running step's or a
    // root's); `make` outlives the call; the allocate/cleanup pair above.
    let p = unsafe {
        sv(
            bsi,
            (&mut make as *mut Make<'_>).cast(),
            name.as_ptr(),
            Some(var_alloc),
            Some(var_free),
        )
    };
    if let Some(p) = panic {
        resume_unwind(p);
    }
    // SAFETY: NULL, or the `Box<VarCell>` made for this name (the `rust:`
    // prefix keeps C variables apart), alive until the root's state goes.
    let cell = unsafe { (p as *mut VarCell).as_mut() }?;
    cell.downcast_mut::<T>()
}

/// A root of another implementation, owned from Rust: add Rust steps,
/// then [`execute`](Self::execute). Dropping it frees the root.
///
/// See the [`cabi` docs](crate::cabi#rust-steps-in-a-foreign-flow-wrap) for an example.
pub struct ForeignRoot {
    bsi: *mut FutoInAsyncSteps,
    arena: *const Arena,
    /// A call that could not be made; reported by `execute`.
    misuse: Option<Error>,
}

// SAFETY: `from_raw`'s contract: the root's entries may be called from any
// thread (this crate's roots are reference-counted and lock their state);
// the arena is `Sync`, and every closure in it is `Send`.
unsafe impl Send for ForeignRoot {}

impl std::fmt::Debug for ForeignRoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForeignRoot")
            .field("bsi", &self.bsi)
            .finish()
    }
}

impl ForeignRoot {
    /// Takes ownership of a root handle (from `futoin_asyncsteps_new`,
    /// `newInstance`, or another implementation's constructor). On error
    /// the root is freed.
    ///
    /// # Safety
    /// `bsi` is NULL or a root not yet executed, that nothing else frees,
    /// of an implementation that keeps the rules in the [`cabi`
    /// docs](crate::cabi#rust-steps-in-a-foreign-flow-wrap) and whose root
    /// entries work from any thread.
    pub unsafe fn from_raw(bsi: *mut FutoInAsyncSteps) -> Result<Self, Error> {
        // SAFETY: the caller's root, when not NULL.
        if bsi.is_null() || unsafe { (*bsi).api.is_null() } {
            return Err(Error::internal("wrap: the root handle is NULL"));
        }
        let mut root = ForeignRoot {
            bsi,
            arena: std::ptr::null(),
            misuse: None,
        };
        // SAFETY: the caller's live root; its own table.
        root.arena = unsafe { arena_of(bsi, root.api()) };
        if root.arena.is_null() {
            return Err(Error::internal(
                "wrap: the root gave no stateVariable() memory to keep Rust callbacks in",
            ));
        }
        Ok(root)
    }

    /// The raw handle (to pass to C code; still owned here).
    pub fn as_ptr(&self) -> *mut FutoInAsyncSteps {
        self.bsi
    }

    fn api(&self) -> &FutoInAsyncStepsAPI {
        // SAFETY: a live root (from_raw's contract) starts with its table.
        unsafe { &*(*self.bsi).api }
    }

    fn push(&mut self, f: ExecFn, c: Option<CatchFn>) -> &mut Self {
        // SAFETY: the live root (from_raw's contract); the arena lives
        // until the root's state goes, after the root ran or was freed.
        if let Err(e) = unsafe { add_step(Keeper::Arena(self.arena), self.bsi, Some(f), c) } {
            self.note(e);
        }
        self
    }

    fn note(&mut self, e: Error) {
        self.misuse.get_or_insert(e);
    }

    /// Adds a step (spec `add`).
    pub fn add<F, A>(&mut self, f: F) -> &mut Self
    where
        F: FnOnce(&mut ForeignSteps<'_>, A) -> StepResult + Send + 'static,
        A: FromArgs + 'static,
    {
        self.push(exec_fn(f), None)
    }

    /// Adds a step with an error handler (spec `add(func, onerror)`).
    pub fn add_catch<F, A, C>(&mut self, f: F, on_error: C) -> &mut Self
    where
        F: FnOnce(&mut ForeignSteps<'_>, A) -> StepResult + Send + 'static,
        A: FromArgs + 'static,
        C: FnOnce(&mut ForeignSteps<'_>, &Error) -> StepResult + Send + 'static,
    {
        self.push(exec_fn(f), Some(Box::new(on_error)))
    }

    /// Adds a step that completes with `args` (spec `successStep`).
    pub fn success_step(&mut self, args: impl IntoArgs + Send + 'static) -> &mut Self {
        self.add(move |s, ()| s.success(args))
    }

    /// Adds a parallel step (spec `parallel`); add branches to the result.
    pub fn parallel(&mut self) -> ForeignParallel<'_> {
        self.parallel_impl(None)
    }

    /// [`parallel`](Self::parallel) with an error handler.
    pub fn parallel_catch<C>(&mut self, on_error: C) -> ForeignParallel<'_>
    where
        C: FnOnce(&mut ForeignSteps<'_>, &Error) -> StepResult + Send + 'static,
    {
        self.parallel_impl(Some(Box::new(on_error)))
    }

    fn parallel_impl(&mut self, c: Option<CatchFn>) -> ForeignParallel<'_> {
        let (bsi, keeper) = (self.bsi, Keeper::Arena(self.arena));
        // SAFETY: as in `push`, used while `self` is borrowed.
        unsafe { ForeignParallel::open(bsi, keeper, c, &mut self.misuse) }
    }

    /// Adds a step that runs `f` holding `sync` (spec `sync`).
    ///
    /// # Safety
    /// `sync` is a live `FutoInSync` for as long as the flow may use it.
    pub unsafe fn sync<F, A>(&mut self, sync: *mut FutoInSync, f: F) -> &mut Self
    where
        F: FnOnce(&mut ForeignSteps<'_>, A) -> StepResult + Send + 'static,
        A: FromArgs + 'static,
    {
        let slot = StepSlot {
            exec: Mutex::new(Some(exec_fn(f))),
            catch: Mutex::new(None),
        };
        // SAFETY: as in `push`.
        let p = unsafe { Keeper::Arena(self.arena).keep(slot) }.expect("the arena keeps anything");
        match self.api().add_sync {
            // SAFETY: the live root; the caller's sync object.
            Some(add_sync) => unsafe { add_sync(self.bsi, sync, p.cast(), Some(exec_tramp), None) },
            None => self.note(Error::internal("wrap: the implementation has no addSync")),
        }
        self
    }

    /// The Rust state variable `name` of the flow, made with `init` on
    /// first use (see [`ForeignSteps::state_variable`]).
    pub fn state_variable<T: Send + 'static>(
        &mut self,
        name: &str,
        init: impl FnOnce() -> T,
    ) -> Option<&mut T> {
        state_variable(self.bsi, self.api(), name, init)
    }

    /// Starts the flow (spec `execute`); `on_unhandled` gets the error no
    /// handler took (its code; the binary interface carries no info here).
    /// Keep the returned [`ForeignFlow`] while the flow runs: dropping it
    /// frees the root, which cancels a flow still running.
    pub fn execute(mut self, on_unhandled: impl FnOnce(Error) + Send + 'static) -> ForeignFlow {
        let bsi = std::mem::replace(&mut self.bsi, std::ptr::null_mut());
        let flow = ForeignFlow { bsi };
        if let Some(e) = self.misuse.take() {
            on_unhandled(e);
            return flow;
        }
        let slot: UnhandledSlot = Mutex::new(Some(Box::new(on_unhandled)));
        // SAFETY: as in `push`.
        let p = unsafe { Keeper::Arena(self.arena).keep(slot) }.expect("the arena keeps anything");
        // SAFETY: the live root (now owned by `flow`).
        match unsafe { &*(*bsi).api }.execute {
            // SAFETY: as above; the slot lives in the root's arena.
            Some(ex) => unsafe { ex(bsi, p.cast(), Some(unhandled_tramp)) },
            None => {
                // SAFETY: the slot is in the arena; its callback is called
                // here instead.
                unsafe {
                    unhandled_tramp(bsi, p.cast(), c"InternalError".as_ptr());
                }
            }
        }
        flow
    }
}

impl Drop for ForeignRoot {
    fn drop(&mut self) {
        free_root(self.bsi);
    }
}

fn free_root(bsi: *mut FutoInAsyncSteps) {
    if bsi.is_null() {
        return;
    }
    // SAFETY: a live root owned by the caller, freed once here.
    if let Some(free) = unsafe { &*(*bsi).api }.free {
        // SAFETY: as above.
        unsafe { free(bsi) };
    }
}

/// A running foreign root (from [`ForeignRoot::execute`]). Dropping it
/// frees the root: a flow still running is cancelled.
pub struct ForeignFlow {
    bsi: *mut FutoInAsyncSteps,
}

// SAFETY: as for `ForeignRoot`: root entries work from any thread.
unsafe impl Send for ForeignFlow {}
// SAFETY: `cancel` is the only shared call, and it is thread-safe by the
// same contract.
unsafe impl Sync for ForeignFlow {}

impl std::fmt::Debug for ForeignFlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForeignFlow")
            .field("bsi", &self.bsi)
            .finish()
    }
}

impl ForeignFlow {
    /// Cancels the flow (spec root `cancel`); safe from any thread.
    pub fn cancel(&self) {
        // SAFETY: the live root this handle owns.
        if let Some(cancel) = unsafe { &*(*self.bsi).api }.cancel {
            // SAFETY: as above.
            unsafe { cancel(self.bsi) };
        }
    }

    /// The raw handle (still owned here).
    pub fn as_ptr(&self) -> *mut FutoInAsyncSteps {
        self.bsi
    }
}

impl Drop for ForeignFlow {
    fn drop(&mut self) {
        free_root(self.bsi);
    }
}
