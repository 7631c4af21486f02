//! [`Error`] and [`StepResult`]: what a step raises (re-exported at the
//! crate root).

use super::codes;
use std::borrow::Cow;
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
/// handing it to the handlers.
#[derive(Clone)]
pub struct Error(Arc<Inner>);

thread_local! {
    /// The `Timeout` a step's timer raises, shared by the flows of this
    /// thread: a timeout allocates no error.
    static TIMEOUT: Error = Error::new(codes::TIMEOUT);
}

impl Error {
    /// An error with a code and no info.
    pub fn new(code: impl Into<Cow<'static, str>>) -> Self {
        Error(Arc::new(Inner {
            code: code.into(),
            info: None,
            control: Control::None,
        }))
    }

    /// An error with a code and an info string.
    pub fn with_info(
        code: impl Into<Cow<'static, str>>,
        info: impl Into<Cow<'static, str>>,
    ) -> Self {
        Error(Arc::new(Inner {
            code: code.into(),
            info: Some(info.into()),
            control: Control::None,
        }))
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
        Error(Arc::new(Inner {
            code: Cow::Borrowed(code),
            info: label,
            control,
        }))
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
