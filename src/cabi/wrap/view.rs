//! [`ForeignSteps`] itself: the view of one running step of a foreign
//! flow, how a callback gets one ([`wrap`], [`wrap_step`]) and how the
//! callback ends ([`ForeignSteps::complete`]), with the helpers both sides
//! of the boundary share. The calls of the spec on the view are in
//! `calls.rs`.

use crate::args::{Args, FromArgs};
use crate::cabi::types::*;
use crate::cabi::value;
use crate::error::{Control, Error, StepResult};
use crate::tool::panic_error;
use std::borrow::Cow;
use std::ffi::{c_char, CStr, CString};
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Views the step handle `bsi` as a [`ForeignSteps`].
///
/// End the callback with [`ForeignSteps::complete`], which turns a returned
/// `Err` into the interface's `handle_error` (or `breakLoop`/`continueLoop`
/// for [`break_loop`](ForeignSteps::break_loop) and friends). [`wrap_step`]
/// does this for you.
///
/// # Safety
/// `bsi` is the handle an execute or error callback of a live flow
/// received, its implementation keeps the rules in the [`cabi`
/// docs](crate::cabi#rust-steps-in-a-foreign-flow-wrap), and the view is
/// used only during that callback (`'a`).
///
/// # Panics
/// Never; a NULL `bsi` or table is a caller error checked with
/// `debug_assert!` (use [`wrap_step`] for a checked entry).
pub unsafe fn wrap<'a>(bsi: *mut FutoInAsyncSteps) -> ForeignSteps<'a> {
    debug_assert!(!bsi.is_null());
    ForeignSteps {
        bsi,
        // SAFETY: the caller's live handle starts with its table pointer.
        api: unsafe { &*(*bsi).api },
        misuse: None,
        _cb: PhantomData,
    }
}

/// [`wrap`], or `None` for a NULL handle or table.
///
/// # Safety
/// As for [`wrap`], when not NULL.
pub(super) unsafe fn wrap_checked<'a>(bsi: *mut FutoInAsyncSteps) -> Option<ForeignSteps<'a>> {
    // SAFETY: the caller's handle, when not NULL.
    if bsi.is_null() || unsafe { (*bsi).api.is_null() } {
        return None;
    }
    // SAFETY: checked above; the caller's contract otherwise.
    Some(unsafe { wrap(bsi) })
}

/// Runs `f` as the body of an execute callback of a foreign flow: moves
/// the values out of `args`, decodes them as `A`, runs `f` (a panic
/// becomes `InternalError`), and completes the callback with its result.
///
/// ```
/// use futoin_asyncsteps::cabi::types::{FutoInArgs, FutoInAsyncSteps};
/// use futoin_asyncsteps::cabi::wrap_step;
/// use std::ffi::c_void;
///
/// /// A C step written with the Rust API: doubles an int.
/// unsafe extern "C" fn double(bsi: *mut FutoInAsyncSteps, _: *mut c_void, args: *const FutoInArgs) {
///     // SAFETY: called by the implementation with its live handle and args.
///     unsafe { wrap_step(bsi, args, |s, (v,): (i32,)| s.success((v * 2,))) }
/// }
/// # let _ = double;
/// ```
///
/// # Safety
/// `bsi` and `args` are what the implementation gave the callback (NULL
/// `bsi` is a no-op); the rules in the [`cabi`
/// docs](crate::cabi#rust-steps-in-a-foreign-flow-wrap) hold.
pub unsafe fn wrap_step<A, F>(bsi: *mut FutoInAsyncSteps, args: *const FutoInArgs, f: F)
where
    A: FromArgs,
    F: FnOnce(&mut ForeignSteps<'_>, A) -> StepResult,
{
    // SAFETY: the caller's handle.
    let Some(mut s) = (unsafe { wrap_checked(bsi) }) else {
        // Still take the values, so their cleanup runs once.
        // SAFETY: the caller's args.
        drop(unsafe { take_args(args) });
        return;
    };
    // SAFETY: the caller's args.
    let a = unsafe { take_args(args) };
    let r = guarded("a wrapped step", || {
        let mut a = a?;
        let a = A::from_args(&mut a)?;
        f(&mut s, a)
    });
    s.complete(r);
}

/// A Rust view of one running step of a foreign flow (see [`wrap`]).
///
/// Errors are returned, handlers recover, and a waiting step is completed
/// from another thread, as with [`Step`](crate::Step):
///
/// ```
/// use futoin_asyncsteps::cabi::{futoin_asyncsteps_new, futoin_runtime_free, futoin_runtime_new};
/// use futoin_asyncsteps::cabi::ForeignRoot;
/// use std::sync::mpsc::channel;
///
/// let rt = futoin_runtime_new(1);
/// // SAFETY: a fresh root of a live runtime, owned by `root` from here.
/// let mut root = unsafe { ForeignRoot::from_raw(futoin_asyncsteps_new(rt)) }?;
/// root.add_catch(
///     |s, ()| s.error("NotFound", "no such user"),
///     |s, e| s.success((format!("{}: {}", e.code(), e.info().unwrap_or("")),)),
/// );
/// root.add(|s, (msg,): (String,)| {
///     let h = s.wait_external();
///     std::thread::spawn(move || h.success((msg.len() as u32,)).unwrap());
///     Ok(())
/// });
/// let (tx, rx) = channel();
/// root.add(move |_, (n,): (u32,)| {
///     tx.send(n).unwrap();
///     Ok(())
/// });
/// let flow = root.execute(|e| panic!("unexpected {e}"));
/// assert_eq!(rx.recv().unwrap(), "NotFound: no such user".len() as u32);
/// drop(flow);
/// // SAFETY: every root of the runtime is freed.
/// unsafe { futoin_runtime_free(rt) };
/// # Ok::<(), futoin_asyncsteps::Error>(())
/// ```
pub struct ForeignSteps<'a> {
    pub(super) bsi: *mut FutoInAsyncSteps,
    pub(super) api: &'a FutoInAsyncStepsAPI,
    /// A call that could not be made; reported by `complete`.
    pub(super) misuse: Option<Error>,
    _cb: PhantomData<&'a mut FutoInAsyncSteps>,
}

impl std::fmt::Debug for ForeignSteps<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForeignSteps")
            .field("bsi", &self.bsi)
            .finish()
    }
}

/// Calls a table entry, or records that the implementation has none.
macro_rules! call {
    ($s:expr, $entry:ident, $name:literal $(, $arg:expr)*) => {
        match $s.api.$entry {
            // SAFETY: the live handle of this callback (wrap's contract)
            // and arguments of the types the entry takes.
            Some(e) => Some(unsafe { e($s.bsi $(, $arg)*) }),
            None => {
                $s.note(Error::internal(concat!("wrap: the implementation has no ", $name)));
                None
            }
        }
    };
}
pub(super) use call;

impl<'a> ForeignSteps<'a> {
    /// The raw handle (to pass to C code).
    pub fn as_ptr(&self) -> *mut FutoInAsyncSteps {
        self.bsi
    }

    pub(super) fn note(&mut self, e: Error) {
        self.misuse.get_or_insert(e);
    }
    /// Ends the callback: an `Err` (or an earlier call that could not be
    /// made) goes to the implementation as `handle_error(code, info)`, a
    /// loop control as `breakLoop`/`continueLoop`; `Ok` does nothing more.
    pub fn complete(mut self, r: StepResult) {
        let r = match self.misuse.take() {
            Some(m) => Err(m),
            None => r,
        };
        let Err(e) = r else { return };
        let label = |l: &Option<Cow<'static, str>>| l.as_deref().map(c_string);
        match e.control_ref() {
            Control::Break(l) => {
                let l = label(l);
                let p = l.as_ref().map_or(std::ptr::null(), |l| l.as_ptr());
                call!(self, break_loop, "breakLoop", p);
            }
            Control::Continue(l) => {
                let l = label(l);
                let p = l.as_ref().map_or(std::ptr::null(), |l| l.as_ptr());
                call!(self, continue_loop, "continueLoop", p);
            }
            Control::None => {
                let code = c_string(e.code());
                let info = e.info().map(c_string);
                let ip = info.as_ref().map_or(std::ptr::null(), |i| i.as_ptr());
                call!(self, handle_error, "handle_error", code.as_ptr(), ip);
            }
        }
    }

    /// The error an error handler got: `code` and the `error_info` state.
    ///
    /// # Safety
    /// `code` is NULL or NUL-terminated.
    pub(super) unsafe fn error_of(&mut self, code: *const c_char) -> Error {
        let code = if code.is_null() {
            crate::error::codes::INTERNAL_ERROR.to_owned()
        } else {
            // SAFETY: the caller's contract.
            unsafe { CStr::from_ptr(code) }
                .to_string_lossy()
                .into_owned()
        };
        match self.c_state("error_info") {
            Some(i) => Error::with_info(code, i),
            None => Error::new(code),
        }
    }

    /// A predefined state variable of the flow (`error_info`,
    /// `last_exception`), read through the function table.
    pub(super) fn c_state(&mut self, name: &str) -> Option<String> {
        let name = c_string(name);
        let sv = self.api.state_variable?;
        // SAFETY: this callback's live handle; no allocate, so the
        // predefined string (or NULL) comes back.
        let p = unsafe { sv(self.bsi, std::ptr::null_mut(), name.as_ptr(), None, None) };
        (!p.is_null()).then(|| {
            // SAFETY: the predefined variables are NUL-terminated strings,
            // and `p` is not NULL.
            unsafe { CStr::from_ptr(p.cast()) }
                .to_string_lossy()
                .into_owned()
        })
    }
}

/// Moves the values out of a callback's args (their slots are left
/// empty, as the interface's ownership rules allow).
///
/// # Safety
/// `args` is NULL or args as the header describes them, in writable memory
/// wherever a slot is set.
unsafe fn take_args(args: *const FutoInArgs) -> Result<Args, Error> {
    if args.is_null() {
        return Ok(Args::new());
    }
    let mut own = FutoInArgs::EMPTY;
    let src = args as *mut FutoInArgs;
    for i in 0..4 {
        // SAFETY: `args` points at four slots (the caller's contract).
        let slot = unsafe { &raw mut (*src).args[i] };
        // SAFETY: as above; reading a slot's type is always allowed.
        if unsafe { (*slot).type_.is_null() } {
            continue;
        }
        // SAFETY: a set slot: its value moves to `own`, and the source is
        // marked empty so the implementation does not clean it up again.
        unsafe {
            own.args[i] = slot.read();
            (*slot).type_ = std::ptr::null();
        }
    }
    // SAFETY: `own` holds the values just moved, as the header describes.
    unsafe { value::from_c(&mut own) }
}

/// A C string for the interface: an interior NUL becomes U+FFFD.
pub(super) fn c_string(s: &str) -> CString {
    CString::new(s)
        .unwrap_or_else(|_| CString::new(s.replace('\0', "\u{FFFD}")).expect("no NUL left"))
}

/// Runs a callback body, turning a panic into `InternalError`.
pub(super) fn guarded(what: &str, f: impl FnOnce() -> StepResult) -> StepResult {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| Err(panic_error(what, p)))
}
