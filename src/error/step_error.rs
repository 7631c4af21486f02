//! [`Error`] and [`StepResult`]: what a step raises (re-exported at the
//! crate root).

use super::codes;
use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

/// The result a step callback returns: `Ok(())` or an [`Error`] to raise.
///
/// ```
/// use futoin_asyncsteps::{Step, StepResult};
/// fn check(s: &mut Step<'_>, n: i32) -> StepResult {
///     if n < 0 {
///         return s.error("InvalidRequest", "negative");
///     }
///     s.success((n * 2,))
/// }
/// ```
pub type StepResult = Result<(), Error>;

/// Loop control carried by a break/continue error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Control {
    /// A regular error.
    None,
    /// `break_loop(label)`.
    Break(Option<Cow<'static, str>>),
    /// `continue_loop(label)`.
    Continue(Option<Cow<'static, str>>),
}

#[derive(Clone, Debug)]
struct Inner {
    code: Cow<'static, str>,
    info: Option<Cow<'static, str>>,
    control: Control,
}

/// A FutoIn error: a code (e.g. `"NotFound"`, [`codes::TIMEOUT`]) and an
/// optional descriptive info string (the `error_info` state variable).
///
/// The value is one pointer wide, so `StepResult` stays cheap on the hot path.
///
/// ```
/// use futoin_asyncsteps::Error;
/// let e = Error::with_info("NotFound", "no such user");
/// assert_eq!(e.code(), "NotFound");
/// assert_eq!(e.info(), Some("no such user"));
/// assert_eq!(e.to_string(), "NotFound: no such user");
/// ```
///
/// Cloning shares the code and info (a reference count, no allocation):
/// the engine keeps the error it raises in `last_exception` as well as
/// handing it to the handlers. An error made of `&'static str`s only is
/// shared too: each thread keeps the last eight such errors it made and
/// hands one out again when the same strings come back, so raising a
/// literal error in a loop allocates nothing once it has been made.
#[derive(Clone)]
pub struct Error(Arc<Inner>);

thread_local! {
    /// The `Timeout` a step's timer raises, shared by the flows of this
    /// thread: a timeout allocates no error.
    static TIMEOUT: Error = Error::new(codes::TIMEOUT);
    /// The errors of static strings this thread made last (see
    /// [`Error::make`]).
    static STATIC_ERRORS: RefCell<Interned> = const {
        RefCell::new(Interned {
            errors: [const { None }; INTERNED],
            next: 0,
        })
    };
}

/// How many errors of static strings a thread keeps for reuse.
const INTERNED: usize = 8;

/// The errors of static strings a thread made last, replaced in turn.
struct Interned {
    errors: [Option<Error>; INTERNED],
    next: usize,
}

/// The same `&'static str` (the same bytes at the same address).
fn same(a: &str, b: &'static str) -> bool {
    std::ptr::eq(a, b)
}

impl Inner {
    /// True when this error is made of exactly these static strings.
    fn is_static(&self, code: &'static str, info: Option<&'static str>, control: &Control) -> bool {
        let info_same = match (&self.info, info) {
            (None, None) => true,
            (Some(Cow::Borrowed(a)), Some(b)) => same(a, b),
            _ => false,
        };
        matches!(&self.code, Cow::Borrowed(c) if same(c, code))
            && info_same
            && self.control == *control
    }
}

impl Error {
    /// An error of `code`, `info` and `control`. One made of static
    /// strings only (a literal code and info, a loop control without a
    /// label or with a literal one) is taken from the thread's last
    /// [`INTERNED`] such errors when it is among them (a shared reference,
    /// no allocation): a step that raises the same error again and again,
    /// as a server refusing requests does, allocates none.
    fn make(code: Cow<'static, str>, info: Option<Cow<'static, str>>, control: Control) -> Self {
        if let (Cow::Borrowed(c), None | Some(Cow::Borrowed(_))) = (&code, &info) {
            let i = match &info {
                Some(Cow::Borrowed(i)) => Some(*i),
                _ => None,
            };
            let kept = STATIC_ERRORS.try_with(|cell| {
                let mut k = cell.try_borrow_mut().ok()?;
                if let Some(e) = k
                    .errors
                    .iter()
                    .flatten()
                    .find(|e| e.0.is_static(c, i, &control))
                {
                    return Some(e.clone());
                }
                let e = Error(Arc::new(Inner {
                    code: Cow::Borrowed(c),
                    info: i.map(Cow::Borrowed),
                    control: control.clone(),
                }));
                let at = k.next;
                k.next = (at + 1) % INTERNED;
                k.errors[at] = Some(e.clone());
                Some(e)
            });
            if let Ok(Some(e)) = kept {
                return e;
            }
        }
        Error(Arc::new(Inner {
            code,
            info,
            control,
        }))
    }

    /// An error with a code and no info.
    pub fn new(code: impl Into<Cow<'static, str>>) -> Self {
        Self::make(code.into(), None, Control::None)
    }

    /// An error with a code and an info string.
    pub fn with_info(
        code: impl Into<Cow<'static, str>>,
        info: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self::make(code.into(), Some(info.into()), Control::None)
    }

    /// An `InternalError` with the given info; every misuse of the API is one.
    ///
    /// ```
    /// use futoin_asyncsteps::{error::codes, Error};
    /// assert_eq!(Error::internal("oops").code(), codes::INTERNAL_ERROR);
    /// ```
    pub fn internal(info: impl Into<Cow<'static, str>>) -> Self {
        Self::with_info(codes::INTERNAL_ERROR, info)
    }

    /// A `Timeout` error (shared per thread, see `TIMEOUT`; a new one
    /// while the thread's locals are being destroyed).
    pub(crate) fn timeout() -> Self {
        TIMEOUT
            .try_with(Error::clone)
            .unwrap_or_else(|_| Error::new(codes::TIMEOUT))
    }

    pub(crate) fn control(control: Control) -> Self {
        let (code, label) = match &control {
            Control::Break(l) => (codes::LOOP_BREAK, l.clone()),
            Control::Continue(l) => (codes::LOOP_CONT, l.clone()),
            Control::None => (codes::INTERNAL_ERROR, None),
        };
        Self::make(Cow::Borrowed(code), label, control)
    }

    /// The error code.
    pub fn code(&self) -> &str {
        &self.0.code
    }

    /// The info string, if any.
    pub fn info(&self) -> Option<&str> {
        self.0.info.as_deref()
    }

    /// True when the code equals `code`.
    ///
    /// ```
    /// use futoin_asyncsteps::{error::codes, Error};
    /// assert!(Error::new(codes::TIMEOUT).is(codes::TIMEOUT));
    /// ```
    pub fn is(&self, code: &str) -> bool {
        self.code() == code
    }

    pub(crate) fn control_ref(&self) -> &Control {
        &self.0.control
    }

    /// Turns a loop-control error into a plain error (no loop matched).
    pub(crate) fn into_plain(mut self) -> Self {
        if self.0.control != Control::None {
            Arc::make_mut(&mut self.0).control = Control::None;
        }
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.info() {
            Some(info) => write!(f, "{}: {}", self.code(), info),
            None => f.write_str(self.code()),
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("code", &self.code())
            .field("info", &self.info())
            .finish()
    }
}

impl std::error::Error for Error {}

impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        self.code() == other.code() && self.info() == other.info()
    }
}

impl From<std::io::Error> for Error {
    /// I/O errors become `CommError` with the OS message as info.
    fn from(e: std::io::Error) -> Self {
        Error::with_info(codes::COMM_ERROR, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_is_one_pointer() {
        assert_eq!(std::mem::size_of::<Error>(), std::mem::size_of::<usize>());
        assert_eq!(
            std::mem::size_of::<StepResult>(),
            std::mem::size_of::<usize>()
        );
    }

    #[test]
    fn control_codes() {
        let b = Error::control(Control::Break(Some("L".into())));
        assert_eq!(b.code(), codes::LOOP_BREAK);
        assert_eq!(b.info(), Some("L"));
        let p = b.into_plain();
        assert_eq!(*p.control_ref(), Control::None);
        assert_eq!(p.code(), codes::LOOP_BREAK);
    }

    /// A clone shares the error; making one plain leaves the other's
    /// loop control as it was.
    #[test]
    fn into_plain_on_a_shared_error() {
        let b = Error::control(Control::Continue(None));
        let kept = b.clone();
        let p = b.into_plain();
        assert_eq!(*p.control_ref(), Control::None);
        assert_eq!(*kept.control_ref(), Control::Continue(None));
        assert_eq!(p.code(), kept.code());
    }

    /// An error of static strings is made once per thread and shared;
    /// one of other strings, or of another control, is a new one.
    #[test]
    fn static_errors_are_shared_per_thread() {
        const INFO: &str = "no such user";
        let a = Error::with_info("NotFound", INFO);
        let b = Error::with_info("NotFound", INFO);
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert!(Arc::ptr_eq(&Error::new("Busy").0, &Error::new("Busy").0));
        let owned = Error::with_info("NotFound", String::from(INFO));
        assert!(!Arc::ptr_eq(&a.0, &owned.0));
        assert_eq!(a, owned, "equal by code and info all the same");
        let no_info = Error::new("NotFound");
        assert!(!Arc::ptr_eq(&a.0, &no_info.0));
        let brk = Error::control(Control::Break(None));
        assert!(Arc::ptr_eq(&brk.0, &Error::control(Control::Break(None)).0));
        let cont = Error::control(Control::Continue(None));
        assert!(!Arc::ptr_eq(&brk.0, &cont.0), "another control");
        // A shared one made plain leaves the others as they are.
        let plain = Error::control(Control::Break(None)).into_plain();
        assert_eq!(*plain.control_ref(), Control::None);
        assert_eq!(*brk.control_ref(), Control::Break(None));
        let other = std::thread::spawn(move || Error::with_info("NotFound", INFO))
            .join()
            .unwrap();
        assert!(!Arc::ptr_eq(&a.0, &other.0), "kept per thread");
        // Eight others push it out; it is made anew.
        for i in 0..INTERNED {
            let _ = Error::with_info("Filler", ["0", "1", "2", "3", "4", "5", "6", "7"][i]);
        }
        assert!(!Arc::ptr_eq(&a.0, &Error::with_info("NotFound", INFO).0));
    }

    #[test]
    fn timeout_is_shared_per_thread() {
        let (a, b) = (Error::timeout(), Error::timeout());
        assert!(a.is(codes::TIMEOUT) && a.info().is_none());
        assert!(Arc::ptr_eq(&a.0, &b.0));
        let other = std::thread::spawn(Error::timeout).join().unwrap();
        assert!(other.is(codes::TIMEOUT));
        assert!(!Arc::ptr_eq(&a.0, &other.0));
    }
}
