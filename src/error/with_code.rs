//! [`WithCode`]: naming the FutoIn code of any error, for `?` in a step.

use super::step_error::Error;
use std::borrow::Cow;
use std::fmt::Display;

/// Names the FutoIn error code of a failure, so `?` works on any `Result`
/// (and on an `Option`) inside a step: the error becomes an [`Error`]
/// with that code and the error's text as its info. On a `Result` whose
/// error is already an [`Error`], the new code replaces its code (the old
/// one stays in the info, as text): `?` alone keeps it.
///
/// ```
/// use futoin_asyncsteps::{AsyncSteps, TestTool, WithCode};
///
/// let mut tool = TestTool::new();
/// let mut root = AsyncSteps::new();
/// root.add(|s, ()| {
///     let n: i64 = "forty-two".parse().code("BadRequest")?;
///     s.success((n,))
/// });
/// let p = root.promise::<(i64,)>(&mut tool);
/// let e = tool.block_on(p).unwrap_err();
/// assert_eq!(e.code(), "BadRequest");
/// assert_eq!(e.info(), Some("invalid digit found in string"));
///
/// // An `Option`: `None` gives the code alone.
/// let mut root = AsyncSteps::new();
/// root.add(|s, ()| {
///     let users = ["ann", "bob"];
///     let i = users.iter().position(|u| *u == "eve").code("NotFound")?;
///     s.success((i,))
/// });
/// let p = root.promise::<(usize,)>(&mut tool);
/// assert_eq!(tool.block_on(p).unwrap_err().code(), "NotFound");
/// ```
pub trait WithCode<T> {
    /// The value, or an [`Error`] with `code` (and the failure's text as
    /// info, for a `Result`).
    fn code(self, code: impl Into<Cow<'static, str>>) -> Result<T, Error>;
}

impl<T, E: Display> WithCode<T> for Result<T, E> {
    fn code(self, code: impl Into<Cow<'static, str>>) -> Result<T, Error> {
        self.map_err(|e| Error::with_info(code, e.to_string()))
    }
}

impl<T> WithCode<T> for Option<T> {
    fn code(self, code: impl Into<Cow<'static, str>>) -> Result<T, Error> {
        self.ok_or_else(|| Error::new(code))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_failure_gets_the_code_and_its_text_as_info() {
        let r: Result<u8, _> = "300".parse::<u8>().code("BadRequest");
        let e = r.unwrap_err();
        assert_eq!(
            (e.code(), e.info()),
            ("BadRequest", Some("number too large to fit in target type"))
        );
        assert_eq!("7".parse::<u8>().code("BadRequest").unwrap(), 7);
        // An `Error` already: its text (code and info) becomes the info.
        let inner: Result<(), Error> = Err(Error::with_info("NotFound", "no user"));
        let e = inner.code("Upstream").unwrap_err();
        assert_eq!(
            (e.code(), e.info()),
            ("Upstream", Some("NotFound: no user"))
        );
        // A code made at run time.
        let e = None::<u8>.code(format!("E{}", 42)).unwrap_err();
        assert_eq!((e.code(), e.info()), ("E42", None));
        assert_eq!(Some(1).code("NotFound").unwrap(), 1);
    }
}
