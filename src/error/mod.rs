//! Errors: the FutoIn error codes ([`codes`]); the error type itself,
//! [`crate::Error`], and [`crate::StepResult`] are at the
//! crate root.
//!
//! A step "throws" by returning `Err(Error)`. [`Step::error`](crate::Step::error)
//! builds that value, so `return s.error("NotFound", "no such user")` and `?`
//! both work; [`WithCode`] names the code of any other failure for `?`
//! (`"x".parse::<i64>().code("BadRequest")?`). Loop control (`break_loop` / `continue_loop`) travels the same
//! way, with the reserved codes [`codes::LOOP_BREAK`] and [`codes::LOOP_CONT`].

/// Standard FutoIn error codes (FTN3 / FTN12) and the few codes this crate adds.
///
/// Any other string is a valid user error code as well.
///
/// ```
/// use futoin_asyncsteps::{error::codes, Error};
/// let e = Error::new(codes::TIMEOUT);
/// assert_eq!(e.code(), "Timeout");
/// ```
pub mod codes {
    /// Connection could not be established.
    pub const CONNECT_ERROR: &str = "ConnectError";
    /// Communication failed after the connection was made.
    pub const COMM_ERROR: &str = "CommError";
    /// The interface is not known.
    pub const UNKNOWN_INTERFACE: &str = "UnknownInterface";
    /// The interface version is not supported.
    pub const NOT_SUPPORTED_VERSION: &str = "NotSupportedVersion";
    /// The function is not implemented.
    pub const NOT_IMPLEMENTED: &str = "NotImplemented";
    /// Authentication failed.
    pub const UNAUTHORIZED: &str = "Unauthorized";
    /// An error inside the implementation, including every API misuse.
    pub const INTERNAL_ERROR: &str = "InternalError";
    /// The invoker failed.
    pub const INVOKER_ERROR: &str = "InvokerError";
    /// The request is malformed.
    pub const INVALID_REQUEST: &str = "InvalidRequest";
    /// Rejected by a defense mechanism (e.g. a full sync queue).
    pub const DEFENSE_REJECTED: &str = "DefenseRejected";
    /// Re-authentication is required.
    pub const PLEASE_REAUTH: &str = "PleaseReauth";
    /// A security policy was violated.
    pub const SECURITY_ERROR: &str = "SecurityError";
    /// A step's time limit (`set_timeout`) expired.
    pub const TIMEOUT: &str = "Timeout";
    /// A `break_loop` whose label matched no enclosing loop.
    pub const LOOP_BREAK: &str = "LoopBreak";
    /// A `continue_loop` whose label matched no enclosing loop.
    pub const LOOP_CONT: &str = "LoopCont";
    /// The flow was cancelled (root `cancel()`); only seen by result waiters.
    pub const CANCELED: &str = "Canceled";
}

// Defined apart, so that they are reachable at the crate root only.
pub(crate) mod step_error;
mod with_code;

pub(crate) use step_error::{Control, Error, StepResult};
pub use with_code::WithCode;
