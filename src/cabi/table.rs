//! How a handle of ours is told apart from any other `FutoInAsyncSteps*`:
//! by the function table its header points to.
//!
//! Each handle type names its table through [`Table`], which is
//! implemented next to the tables themselves; so the files that build and
//! recognise handles never import the file that holds the tables (whose
//! entries call into them).

use super::types::{FutoInAsyncSteps, FutoInAsyncStepsAPI};

/// A handle type of ours: `#[repr(C)]`, starting with a
/// `FutoInAsyncSteps` header whose `api` is [`Table::table`].
///
/// # Safety
/// The type is `#[repr(C)]` and starts with a `FutoInAsyncSteps`;
/// `table()` always returns the same static, which no other type puts in a
/// header. Code that finds that table in a header may then read the
/// handle as this type.
pub(crate) unsafe trait Table {
    /// The table in the header of every handle of this type.
    fn table() -> &'static FutoInAsyncStepsAPI;
}

/// The header of a new handle of type `H`.
///
/// # Safety
/// The header goes into a new value of type `H` (its first field), and
/// nowhere else: [`is`] takes any header that points to `H`'s table for
/// an `H`.
#[inline]
pub(crate) unsafe fn header<H: Table>() -> FutoInAsyncSteps {
    FutoInAsyncSteps { api: H::table() }
}

/// True when `p` is a handle of type `H` (false for NULL and for any other
/// handle, such as another implementation's).
///
/// # Safety
/// `p` is NULL or points to a `FutoInAsyncSteps` of any implementation,
/// readable up to its `api` field.
#[inline]
pub(crate) unsafe fn is<H: Table>(p: *mut FutoInAsyncSteps) -> bool {
    // SAFETY: caller's contract: a non-NULL `p` is readable up to `api`.
    !p.is_null() && std::ptr::eq(unsafe { (*p).api }, H::table())
}
