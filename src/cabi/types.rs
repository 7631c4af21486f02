//! The `#[repr(C)]` types of spec 2.7, field for field as in
//! `include/futoin_asyncsteps.h`.

use std::ffi::{c_char, c_int, c_void};

/// `FutoInTypeFlags`: a base type (low nibble) and complex flags.
pub type FutoInTypeFlags = u8;

/// `FTN_TYPE_CUSTOM_OBJECT`
pub const FTN_TYPE_CUSTOM_OBJECT: u8 = 0x01;
/// `FTN_TYPE_STRING` (UTF-8)
pub const FTN_TYPE_STRING: u8 = 0x02;
/// `FTN_TYPE_STRING16` (UTF-16)
pub const FTN_TYPE_STRING16: u8 = 0x03;
/// `FTN_TYPE_STRING32` (UTF-32)
pub const FTN_TYPE_STRING32: u8 = 0x04;
/// `FTN_TYPE_BOOL`
pub const FTN_TYPE_BOOL: u8 = 0x05;
/// `FTN_TYPE_INT8`
pub const FTN_TYPE_INT8: u8 = 0x06;
/// `FTN_TYPE_INT16`
pub const FTN_TYPE_INT16: u8 = 0x07;
/// `FTN_TYPE_INT32`
pub const FTN_TYPE_INT32: u8 = 0x08;
/// `FTN_TYPE_INT64`
pub const FTN_TYPE_INT64: u8 = 0x09;
/// `FTN_TYPE_UINT8`
pub const FTN_TYPE_UINT8: u8 = 0x0A;
/// `FTN_TYPE_UINT16`
pub const FTN_TYPE_UINT16: u8 = 0x0B;
/// `FTN_TYPE_UINT32`
pub const FTN_TYPE_UINT32: u8 = 0x0C;
/// `FTN_TYPE_UINT64`
pub const FTN_TYPE_UINT64: u8 = 0x0D;
/// `FTN_TYPE_FLOAT`
pub const FTN_TYPE_FLOAT: u8 = 0x0E;
/// `FTN_TYPE_DOUBLE`
pub const FTN_TYPE_DOUBLE: u8 = 0x0F;
/// `FTN_BASE_TYPE_MASK`
pub const FTN_BASE_TYPE_MASK: u8 = 0x0F;
/// `FTN_TYPE_ARRAY`: a vector of the base type.
pub const FTN_TYPE_ARRAY: u8 = 0x10;
/// `FTN_COMPLEX_TYPE_MASK`
pub const FTN_COMPLEX_TYPE_MASK: u8 = 0xF0;

/// `FutoInType`: the flags of a value and how to clean it up.
#[repr(C)]
#[derive(Debug)]
pub struct FutoInType {
    /// Base type and complex flags.
    pub flags: FutoInTypeFlags,
    /// Frees what the value owns; may be `None`.
    pub cleanup: Option<unsafe extern "C" fn(v: *mut FutoInBinaryValue)>,
}

/// The payload union of [`FutoInBinaryValue`].
///
/// C code may read it through any member, all 8 bytes with `u64`: from
/// Rust, write it whole, starting from `FutoInValueData { u64: 0 }` (as
/// [`FutoInBinaryValue::EMPTY`] does) and then setting the member. A
/// member narrower than the union, written alone, leaves the other bytes
/// uninitialised.
#[repr(C)]
#[derive(Clone, Copy)]
pub union FutoInValueData {
    /// Pointer payloads: strings, arrays.
    pub p: *const c_void,
    /// `bool`. C code may leave any byte here: read `u8` (non-zero is
    /// true), as this field is undefined behaviour for bytes other than
    /// 0 and 1.
    pub b: bool,
    /// `int8_t`
    pub i8: i8,
    /// `int16_t`
    pub i16: i16,
    /// `int32_t`
    pub i32: i32,
    /// `int64_t`
    pub i64: i64,
    /// `uint8_t`
    pub u8: u8,
    /// `uint16_t`
    pub u16: u16,
    /// `uint32_t`
    pub u32: u32,
    /// `uint64_t`
    pub u64: u64,
    /// `float`
    pub f: f32,
    /// `double`
    pub d: f64,
}

/// Shows no member: which one is set is known only from the value's type
/// (and reading a wider member than was written reads uninitialised bytes).
impl std::fmt::Debug for FutoInValueData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FutoInValueData").finish_non_exhaustive()
    }
}

/// `FutoInBinaryValue`: one argument value.
#[repr(C)]
pub struct FutoInBinaryValue {
    /// The type, or NULL for an empty slot.
    pub type_: *const FutoInType,
    /// The payload.
    pub v: FutoInValueData,
    /// Implementation data (custom objects).
    pub custom_data: *mut c_void,
    /// Code units of a string, elements of an array.
    pub length: u32,
}

impl FutoInBinaryValue {
    /// An empty slot.
    pub const EMPTY: FutoInBinaryValue = FutoInBinaryValue {
        type_: std::ptr::null(),
        v: FutoInValueData { u64: 0 },
        custom_data: std::ptr::null_mut(),
        length: 0,
    };
}

impl std::fmt::Debug for FutoInBinaryValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The payload is left out: which member it holds depends on the
        // type, and one built in Rust from a narrower member has bytes
        // that must not be read.
        f.debug_struct("FutoInBinaryValue")
            .field("type", &self.type_)
            .field("custom_data", &self.custom_data)
            .field("length", &self.length)
            .finish_non_exhaustive()
    }
}

/// `FutoInArgs`: up to four values.
#[repr(C)]
#[derive(Debug)]
pub struct FutoInArgs {
    /// `arg0`..`arg3`
    pub args: [FutoInBinaryValue; 4],
}

impl FutoInArgs {
    /// Four empty slots.
    pub const EMPTY: FutoInArgs = FutoInArgs {
        args: [
            FutoInBinaryValue::EMPTY,
            FutoInBinaryValue::EMPTY,
            FutoInBinaryValue::EMPTY,
            FutoInBinaryValue::EMPTY,
        ],
    };
}

/// `FutoInHandle`: a scheduled callback of the AsyncTool entries.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FutoInHandle {
    /// The loop (identity only, never dereferenced).
    pub data1: *mut c_void,
    /// Unused (NULL).
    pub data2: *mut c_void,
    /// The task key.
    pub data3: isize,
}

impl FutoInHandle {
    /// The empty handle: never valid.
    pub const EMPTY: FutoInHandle = FutoInHandle {
        data1: std::ptr::null_mut(),
        data2: std::ptr::null_mut(),
        data3: 0,
    };
}

/// `FutoInAsyncSteps_execute_callback`
pub type ExecuteCallback = Option<
    unsafe extern "C" fn(bsi: *mut FutoInAsyncSteps, data: *mut c_void, args: *const FutoInArgs),
>;
/// `FutoInAsyncSteps_error_callback`
pub type ErrorCallback = Option<
    unsafe extern "C" fn(bsi: *mut FutoInAsyncSteps, data: *mut c_void, code: *const c_char),
>;
/// `FutoInAsyncSteps_cancel_callback`
pub type CancelCallback =
    Option<unsafe extern "C" fn(bsi: *mut FutoInAsyncSteps, data: *mut c_void)>;
/// A loop body.
pub type LoopCallback = Option<unsafe extern "C" fn(bsi: *mut FutoInAsyncSteps, data: *mut c_void)>;
/// A `repeat` body.
pub type RepeatCallback =
    Option<unsafe extern "C" fn(bsi: *mut FutoInAsyncSteps, data: *mut c_void, i: usize)>;
/// A scheduled callback.
pub type SchedCallback = Option<unsafe extern "C" fn(data: *mut c_void)>;

/// `FutoInAsyncStepsAPI`: the 25 entries in spec order.
#[repr(C)]
#[derive(Debug)]
#[allow(missing_docs)] // the entries are the spec's, documented in the header
#[allow(clippy::type_complexity)]
pub struct FutoInAsyncStepsAPI {
    pub add: Option<
        unsafe extern "C" fn(*mut FutoInAsyncSteps, *mut c_void, ExecuteCallback, ErrorCallback),
    >,
    pub parallel: Option<
        unsafe extern "C" fn(
            *mut FutoInAsyncSteps,
            *mut c_void,
            ErrorCallback,
        ) -> *mut FutoInAsyncSteps,
    >,
    pub state_variable: Option<
        unsafe extern "C" fn(
            *mut FutoInAsyncSteps,
            *mut c_void,
            *const c_char,
            Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void>,
            Option<unsafe extern "C" fn(*mut c_void, *mut c_void)>,
        ) -> *mut c_void,
    >,
    pub stack: Option<
        unsafe extern "C" fn(
            *mut FutoInAsyncSteps,
            usize,
            Option<unsafe extern "C" fn(*mut c_void)>,
        ) -> *mut c_void,
    >,
    pub success: Option<unsafe extern "C" fn(*mut FutoInAsyncSteps, *mut FutoInArgs)>,
    pub handle_error:
        Option<unsafe extern "C" fn(*mut FutoInAsyncSteps, *const c_char, *const c_char)>,
    pub set_timeout: Option<unsafe extern "C" fn(*mut FutoInAsyncSteps, u32)>,
    pub set_cancel:
        Option<unsafe extern "C" fn(*mut FutoInAsyncSteps, *mut c_void, CancelCallback)>,
    pub wait_external: Option<unsafe extern "C" fn(*mut FutoInAsyncSteps)>,
    pub loop_: Option<
        unsafe extern "C" fn(*mut FutoInAsyncSteps, *mut c_void, LoopCallback, *const c_char),
    >,
    pub repeat: Option<
        unsafe extern "C" fn(
            *mut FutoInAsyncSteps,
            *mut c_void,
            usize,
            RepeatCallback,
            *const c_char,
        ),
    >,
    pub break_loop: Option<unsafe extern "C" fn(*mut FutoInAsyncSteps, *const c_char)>,
    pub continue_loop: Option<unsafe extern "C" fn(*mut FutoInAsyncSteps, *const c_char)>,
    pub execute: Option<unsafe extern "C" fn(*mut FutoInAsyncSteps, *mut c_void, ErrorCallback)>,
    pub cancel: Option<unsafe extern "C" fn(*mut FutoInAsyncSteps)>,
    pub add_sync: Option<
        unsafe extern "C" fn(
            *mut FutoInAsyncSteps,
            *mut FutoInSync,
            *mut c_void,
            ExecuteCallback,
            ErrorCallback,
        ),
    >,
    pub root_id: Option<unsafe extern "C" fn(*mut FutoInAsyncSteps) -> isize>,
    pub is_valid: Option<unsafe extern "C" fn(*mut FutoInAsyncSteps) -> c_int>,
    pub new_instance: Option<unsafe extern "C" fn(*mut FutoInAsyncSteps) -> *mut FutoInAsyncSteps>,
    pub free: Option<unsafe extern "C" fn(*mut FutoInAsyncSteps)>,
    pub sched_immediate: Option<
        unsafe extern "C" fn(*mut FutoInAsyncSteps, *mut c_void, SchedCallback) -> FutoInHandle,
    >,
    pub sched_deferred: Option<
        unsafe extern "C" fn(
            *mut FutoInAsyncSteps,
            u32,
            *mut c_void,
            SchedCallback,
        ) -> FutoInHandle,
    >,
    pub sched_cancel: Option<unsafe extern "C" fn(*mut FutoInAsyncSteps, *mut FutoInHandle)>,
    pub sched_is_valid:
        Option<unsafe extern "C" fn(*mut FutoInAsyncSteps, *mut FutoInHandle) -> c_int>,
    pub is_same_thread: Option<unsafe extern "C" fn(*mut FutoInAsyncSteps) -> c_int>,
}

/// `FutoInAsyncSteps`: what every handle starts with.
#[repr(C)]
#[derive(Debug)]
pub struct FutoInAsyncSteps {
    /// The function table.
    pub api: *const FutoInAsyncStepsAPI,
}

/// `FutoInSyncAPI`
#[repr(C)]
#[derive(Debug)]
#[allow(missing_docs)]
pub struct FutoInSyncAPI {
    pub lock: Option<unsafe extern "C" fn(*mut FutoInAsyncSteps, *mut FutoInSync)>,
    pub unlock: Option<unsafe extern "C" fn(*mut FutoInAsyncSteps, *mut FutoInSync)>,
}

/// `FutoInSync`: what every sync object starts with.
#[repr(C)]
#[derive(Debug)]
pub struct FutoInSync {
    /// The function table.
    pub api: *const FutoInSyncAPI,
}

// The layout the header promises (64-bit targets; tokens already assert
// a 64-bit usize elsewhere).
const _: () = assert!(std::mem::size_of::<FutoInBinaryValue>() == 32);
const _: () = assert!(std::mem::size_of::<FutoInArgs>() == 128);
const _: () = assert!(std::mem::size_of::<FutoInAsyncStepsAPI>() == 25 * 8);
const _: () = assert!(std::mem::size_of::<FutoInHandle>() == 24);
