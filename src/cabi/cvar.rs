//! C state variables (`stateVariable`) in a flow's state map.

use crate::error::Error;
use std::ffi::{c_void, CString};
use std::sync::Arc;

/// A C state variable: `cleanup(data, value)` runs when the last copy of
/// the flow's state holding it is dropped.
#[derive(Clone)]
pub(crate) struct CVar(Arc<CVarInner>);
pub(crate) struct CVarInner {
    value: *mut c_void,
    data: *mut c_void,
    cleanup: Option<unsafe extern "C" fn(*mut c_void, *mut c_void)>,
}
// SAFETY: the header makes state values the user's to share with the
// flow's loop thread; the runtime only passes the pointers back.
unsafe impl Send for CVarInner {}
// SAFETY: as above; the runtime never dereferences the pointers.
unsafe impl Sync for CVarInner {}
impl Drop for CVarInner {
    fn drop(&mut self) {
        if let Some(c) = self.cleanup {
            // SAFETY: the user's cleanup for the value its allocate made.
            unsafe { c(self.data, self.value) };
        }
    }
}

pub(crate) type Allocate = Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void>;
pub(crate) type Cleanup2 = Option<unsafe extern "C" fn(*mut c_void, *mut c_void)>;

/// stateVariable on a state map (a running step's or a root's model).
pub(crate) fn state_var(
    st: &mut crate::state::State,
    name: &str,
    data: *mut c_void,
    allocate: Allocate,
    cleanup: Cleanup2,
) -> Result<*mut c_void, Error> {
    let text = match name {
        "error_info" => Some(st.error_info().map(str::to_owned)),
        "last_exception" => Some(st.last_exception().map(|e| e.code().to_owned())),
        _ => None,
    };
    if let Some(t) = text {
        return Ok(match t.and_then(|t| CString::new(t).ok()) {
            Some(c) => super::handle::give_str(c),
            None => std::ptr::null_mut(),
        });
    }
    if let Some(v) = st.get::<CVar>(name) {
        return Ok(v.0.value);
    }
    if st.contains(name) {
        return Err(Error::internal(format!(
            "stateVariable(): \"{name}\" holds a value that is not a C state variable"
        )));
    }
    let Some(allocate) = allocate else {
        return Ok(std::ptr::null_mut());
    };
    // SAFETY: the user's allocator, called once per name and flow.
    let value = unsafe { allocate(data) };
    st.set(
        name.to_owned(),
        CVar(Arc::new(CVarInner {
            value,
            data,
            cleanup,
        })),
    );
    Ok(value)
}
