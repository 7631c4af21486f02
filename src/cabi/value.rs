//! Success args across the C boundary: [`FutoInArgs`] to [`Args`] and back.
//!
//! From C: primitives become the matching Rust primitive; strings
//! (UTF-8/16/32) are copied into a `String` and their cleanup runs at once;
//! arrays and custom objects travel as a [`BinaryValue`], untouched, and
//! their cleanup runs exactly once, when the value is dropped. To C:
//! primitives map back; `String` becomes a NUL-terminated UTF-8 `STRING`,
//! `Vec<u8>` a `UINT8` array, a [`BinaryValue`] its original value, and any
//! other Rust value an opaque `CUSTOM_OBJECT` that turns back into the Rust
//! value if C passes it on to a Rust step.

use super::types::*;
use crate::args::{ArgValue, Args, CustomValue, Value};
use crate::error::Error;
use std::ffi::{c_void, CStr};

/// An array or custom object that came from C, passed on as it is. Its
/// cleanup runs once, when it is dropped (or when C resets it after the
/// value went back to a C step).
///
/// A Rust step takes it as an argument like any other value:
///
/// ```
/// use futoin_asyncsteps::cabi::BinaryValue;
/// use futoin_asyncsteps::cabi::types::{FutoInBinaryValue, FutoInType, FTN_TYPE_ARRAY, FTN_TYPE_INT32};
///
/// static I32_ARRAY: FutoInType = FutoInType { flags: FTN_TYPE_ARRAY | FTN_TYPE_INT32, cleanup: None };
/// static DATA: [i32; 3] = [1, 2, 3];
/// let mut raw = FutoInBinaryValue::EMPTY;
/// raw.type_ = &I32_ARRAY;
/// raw.v.p = DATA.as_ptr().cast();
/// raw.length = 3;
/// // SAFETY: the value points at static data and has no cleanup.
/// let v = unsafe { BinaryValue::from_raw(raw) };
/// assert_eq!(v.as_slice::<i32>(), Some(&[1, 2, 3][..]));
/// ```
pub struct BinaryValue(FutoInBinaryValue);

// SAFETY: the header requires values given to the runtime to be movable to
// the flow's loop thread (steps of one flow may run on a loop other than
// the caller's); the cleanup may run on any thread.
unsafe impl Send for BinaryValue {}

impl ArgValue for BinaryValue {}

impl std::fmt::Debug for BinaryValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("BinaryValue");
        d.field("flags", &format_args!("{:#04x}", self.flags()));
        if self.flags() & FTN_TYPE_ARRAY != 0 {
            // SAFETY: an array's payload is its `p` member, written whole
            // (from_raw contract: the value is what its type says).
            d.field("p", &unsafe { self.0.v.p });
        }
        d.field("custom_data", &self.0.custom_data)
            .field("length", &self.0.length)
            .finish()
    }
}

impl BinaryValue {
    /// Takes ownership of a C value.
    ///
    /// # Safety
    /// `raw.type_` is NULL or points to a `FutoInType` that outlives the
    /// value, and the value is what its type says (its cleanup, if any,
    /// may be called once with a pointer to it, on any thread).
    pub unsafe fn from_raw(raw: FutoInBinaryValue) -> Self {
        BinaryValue(raw)
    }

    /// Gives the C value back; its cleanup is now the caller's duty.
    pub fn into_raw(self) -> FutoInBinaryValue {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again.
        unsafe { std::ptr::read(&me.0) }
    }

    /// The value as C sees it.
    pub fn raw(&self) -> &FutoInBinaryValue {
        &self.0
    }

    /// The type flags (0 for an empty value).
    pub fn flags(&self) -> u8 {
        // SAFETY: `from_raw`'s contract: a non-NULL type is valid.
        unsafe { self.0.type_.as_ref() }.map_or(0, |t| t.flags)
    }

    /// The elements of an array whose base type is `T`'s.
    pub fn as_slice<T: Element>(&self) -> Option<&[T]> {
        if self.flags() != FTN_TYPE_ARRAY | T::BASE {
            return None;
        }
        // SAFETY: the type says this is an array of T (from_raw contract).
        let p = unsafe { self.0.v.p }.cast::<T>();
        if self.0.length == 0 {
            return Some(&[]);
        }
        if p.is_null() || !p.is_aligned() {
            return None;
        }
        // SAFETY: a non-NULL, aligned array of `length` elements of T, alive
        // while this value is (from_raw contract).
        Some(unsafe { std::slice::from_raw_parts(p, self.0.length as usize) })
    }
}

impl Drop for BinaryValue {
    fn drop(&mut self) {
        // SAFETY: from_raw's contract; cleanup runs once, here.
        unsafe { reset(&mut self.0) }
    }
}

/// Element types of C arrays, for [`BinaryValue::as_slice`].
pub trait Element: Copy + sealed::Sealed {
    /// The `FTN_TYPE_*` base type.
    const BASE: u8;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! elements {
    ($($t:ty => $b:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t { const BASE: u8 = $b; }
    )*};
}
elements!(i8 => FTN_TYPE_INT8, i16 => FTN_TYPE_INT16, i32 => FTN_TYPE_INT32, i64 => FTN_TYPE_INT64,
    u8 => FTN_TYPE_UINT8, u16 => FTN_TYPE_UINT16, u32 => FTN_TYPE_UINT32, u64 => FTN_TYPE_UINT64,
    f32 => FTN_TYPE_FLOAT, f64 => FTN_TYPE_DOUBLE);

/// `futoin_reset_binval`.
///
/// # Safety
/// As [`BinaryValue::from_raw`].
pub(crate) unsafe fn reset(v: &mut FutoInBinaryValue) {
    // SAFETY: caller's contract.
    if let Some(t) = unsafe { v.type_.as_ref() } {
        if let Some(f) = t.cleanup {
            // SAFETY: the type's own cleanup, called once for this value.
            unsafe { f(v) };
        }
    }
    *v = FutoInBinaryValue::EMPTY;
}

macro_rules! static_types {
    ($($n:ident = $f:expr, $c:expr;)*) => {$(
        static $n: FutoInType = FutoInType { flags: $f, cleanup: $c };
    )*};
}
static_types! {
    T_BOOL = FTN_TYPE_BOOL, None;
    T_I8 = FTN_TYPE_INT8, None;
    T_I16 = FTN_TYPE_INT16, None;
    T_I32 = FTN_TYPE_INT32, None;
    T_I64 = FTN_TYPE_INT64, None;
    T_U8 = FTN_TYPE_UINT8, None;
    T_U16 = FTN_TYPE_UINT16, None;
    T_U32 = FTN_TYPE_UINT32, None;
    T_U64 = FTN_TYPE_UINT64, None;
    T_F32 = FTN_TYPE_FLOAT, None;
    T_F64 = FTN_TYPE_DOUBLE, None;
    T_STR = FTN_TYPE_STRING, Some(free_str);
    T_BYTES = FTN_TYPE_ARRAY | FTN_TYPE_UINT8, Some(free_bytes);
    T_RUST = FTN_TYPE_CUSTOM_OBJECT, Some(free_rust);
}

/// Cleanup of a `STRING` made here: `length + 1` bytes (with the NUL).
unsafe extern "C" fn free_str(v: *mut FutoInBinaryValue) {
    // SAFETY: called through T_STR, set only by `to_c` on a leaked boxed
    // slice of `length + 1` bytes.
    unsafe {
        let v = &*v;
        let p = std::ptr::slice_from_raw_parts_mut(v.v.p as *mut u8, v.length as usize + 1);
        drop(Box::from_raw(p));
    }
}

/// Cleanup of a `UINT8` array made here: `length` bytes.
unsafe extern "C" fn free_bytes(v: *mut FutoInBinaryValue) {
    // SAFETY: called through T_BYTES, set only by `to_c` on a leaked boxed
    // slice of `length` bytes.
    unsafe {
        let v = &*v;
        let p = std::ptr::slice_from_raw_parts_mut(v.v.p as *mut u8, v.length as usize);
        drop(Box::from_raw(p));
    }
}

/// Cleanup of a Rust value wrapped as a custom object. A panicking Drop
/// must not unwind into C (that aborts the process); as with the other
/// values dropped for C, it has nobody to report to, and is ignored.
unsafe extern "C" fn free_rust(v: *mut FutoInBinaryValue) {
    // SAFETY: called through T_RUST, set only by `to_c` on a leaked
    // `Box<Box<dyn CustomValue>>` in custom_data; a cleanup runs once per
    // value.
    let b = unsafe { Box::from_raw((*v).custom_data as *mut Box<dyn CustomValue>) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(b)));
}

fn bad(slot: usize, what: impl std::fmt::Display) -> Error {
    Error::internal(format!("args: slot {slot}: {what}"))
}

/// Moves the values out of `a` (every slot ends up empty, each cleanup
/// having run exactly once or passed to a [`BinaryValue`]).
///
/// # Safety
/// `a` holds values as the header describes them.
pub(crate) unsafe fn from_c(a: &mut FutoInArgs) -> Result<Args, Error> {
    let mut out = Args::new();
    let mut err = None;
    let mut ended = None;
    for i in 0..4 {
        let slot = &mut a.args[i];
        if slot.type_.is_null() {
            ended.get_or_insert(i);
            *slot = FutoInBinaryValue::EMPTY;
            continue;
        }
        if err.is_some() {
            // SAFETY: caller's contract.
            unsafe { reset(slot) };
            continue;
        }
        if let Some(e) = ended {
            err = Some(bad(i, format!("set after the empty slot {e}")));
            // SAFETY: caller's contract.
            unsafe { reset(slot) };
            continue;
        }
        // SAFETY: caller's contract.
        match unsafe { value_from_c(slot, i) } {
            Ok(v) => {
                out.push(v).expect("at most four");
            }
            Err(e) => err = Some(e),
        }
    }
    match err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// One value; the slot is empty afterwards.
unsafe fn value_from_c(slot: &mut FutoInBinaryValue, i: usize) -> Result<Value, Error> {
    // SAFETY: caller's contract: a non-NULL type is valid.
    let t = unsafe { &*slot.type_ };
    let flags = t.flags;
    if std::ptr::eq(t, &T_RUST) {
        let p = std::mem::replace(slot, FutoInBinaryValue::EMPTY).custom_data;
        // SAFETY: T_RUST values own a leaked Box<Box<dyn CustomValue>>.
        return Ok(Value::Custom(*unsafe {
            Box::from_raw(p as *mut Box<dyn CustomValue>)
        }));
    }
    let base = flags & FTN_BASE_TYPE_MASK;
    let complex = flags & FTN_COMPLEX_TYPE_MASK;
    let pass =
        complex == FTN_TYPE_ARRAY && base != 0 || complex == 0 && base == FTN_TYPE_CUSTOM_OBJECT;
    if pass {
        let raw = std::mem::replace(slot, FutoInBinaryValue::EMPTY);
        // SAFETY: caller's contract.
        return Ok(Value::Custom(Box::new(unsafe {
            BinaryValue::from_raw(raw)
        })));
    }
    if complex != 0 || base == 0 {
        // SAFETY: caller's contract.
        unsafe { reset(slot) };
        return Err(bad(i, format!("unknown type flags {flags:#04x}")));
    }
    // SAFETY: the union member matching the base type (caller's contract).
    // A BOOL is read as its byte, as C reads a bool (any non-zero byte is
    // true): C code may store any byte there, and a Rust bool must be 0
    // or 1.
    let v = unsafe {
        match base {
            FTN_TYPE_BOOL => Ok(Value::Bool(slot.v.u8 != 0)),
            FTN_TYPE_INT8 => Ok(Value::I8(slot.v.i8)),
            FTN_TYPE_INT16 => Ok(Value::I16(slot.v.i16)),
            FTN_TYPE_INT32 => Ok(Value::I32(slot.v.i32)),
            FTN_TYPE_INT64 => Ok(Value::I64(slot.v.i64)),
            FTN_TYPE_UINT8 => Ok(Value::U8(slot.v.u8)),
            FTN_TYPE_UINT16 => Ok(Value::U16(slot.v.u16)),
            FTN_TYPE_UINT32 => Ok(Value::U32(slot.v.u32)),
            FTN_TYPE_UINT64 => Ok(Value::U64(slot.v.u64)),
            FTN_TYPE_FLOAT => Ok(Value::F32(slot.v.f)),
            FTN_TYPE_DOUBLE => Ok(Value::F64(slot.v.d)),
            _ => string_from_c(slot, base).map(|s| Value::Str(s.into_boxed_str())),
        }
    };
    // SAFETY: caller's contract; the value was copied.
    unsafe { reset(slot) };
    v.map_err(|e| bad(i, e))
}

/// Copies a STRING/STRING16/STRING32: `length` code units, or up to the
/// NUL when `length` is 0.
unsafe fn string_from_c(v: &FutoInBinaryValue, base: u8) -> Result<String, String> {
    // SAFETY: the caller matched a string type; `p` is its data.
    let p = unsafe { v.v.p };
    let n = v.length as usize;
    if p.is_null() {
        return if n == 0 {
            Ok(String::new())
        } else {
            Err("NULL string with a length".into())
        };
    }
    /// The units at `p`: borrowed when `p` is aligned for `T`, else copied
    /// unit by unit (the header puts no alignment rule on string data: a
    /// STRING16 may sit at an odd offset of a byte buffer).
    ///
    /// # Safety
    /// `n` units (or, for 0, units up to a zero) are readable at `p`
    /// while `_owner` is borrowed.
    unsafe fn units<T: Copy + Default + PartialEq>(
        p: *const T,
        n: usize,
        _owner: &FutoInBinaryValue,
    ) -> std::borrow::Cow<'_, [T]> {
        // SAFETY: caller's contract: unit `i` is readable (below `n`, or
        // up to the terminating zero); `read_unaligned` needs no alignment.
        let at = |i: usize| unsafe { p.add(i).read_unaligned() };
        let n = if n > 0 {
            n
        } else {
            (0..).take_while(|&i| at(i) != T::default()).count()
        };
        if p.is_aligned() {
            // SAFETY: caller's contract: `n` units readable, owned by
            // `_owner` (its cleanup has not run); `p` is aligned.
            std::borrow::Cow::Borrowed(unsafe { std::slice::from_raw_parts(p, n) })
        } else {
            std::borrow::Cow::Owned((0..n).map(at).collect())
        }
    }
    match base {
        FTN_TYPE_STRING => {
            // SAFETY: the header's string contract for `v`.
            let b = unsafe { units(p.cast::<u8>(), n, v) };
            std::str::from_utf8(&b)
                .map(str::to_owned)
                .map_err(|e| format!("STRING is not valid UTF-8 ({e})"))
        }
        // SAFETY: as above.
        FTN_TYPE_STRING16 => String::from_utf16(&unsafe { units(p.cast::<u16>(), n, v) })
            .map_err(|_| "STRING16 is not valid UTF-16".to_string()),
        // SAFETY: as above.
        FTN_TYPE_STRING32 => unsafe { units(p.cast::<u32>(), n, v) }
            .iter()
            .map(|&c| char::from_u32(c).ok_or_else(|| format!("STRING32 has {c:#x}, not a char")))
            .collect(),
        _ => Err(format!("unknown type flags {base:#04x}")),
    }
}

/// Puts `args` into the empty slots of `out`.
pub(crate) fn to_c(mut args: Args, out: &mut FutoInArgs) {
    for slot in out.args.iter_mut().take(args.len()) {
        if let Some(v) = args.take(0) {
            *slot = value_to_c(v);
        }
    }
}

/// A payload with all 8 bytes set: zero, then `set` writes one member. A
/// member narrower than the union, written alone, would leave the other
/// bytes uninitialised, and C code may read the union whole.
fn data(set: impl FnOnce(&mut FutoInValueData)) -> FutoInValueData {
    let mut v = FutoInValueData { u64: 0 };
    set(&mut v);
    v
}

fn prim(t: &'static FutoInType, set: impl FnOnce(&mut FutoInValueData)) -> FutoInBinaryValue {
    FutoInBinaryValue {
        type_: t,
        v: data(set),
        custom_data: std::ptr::null_mut(),
        length: 0,
    }
}

fn value_to_c(v: Value) -> FutoInBinaryValue {
    match v {
        Value::Bool(b) => prim(&T_BOOL, |v| v.b = b),
        Value::I8(x) => prim(&T_I8, |v| v.i8 = x),
        Value::I16(x) => prim(&T_I16, |v| v.i16 = x),
        Value::I32(x) => prim(&T_I32, |v| v.i32 = x),
        Value::I64(x) => prim(&T_I64, |v| v.i64 = x),
        Value::Isize(x) => prim(&T_I64, |v| v.i64 = x as i64),
        Value::U8(x) => prim(&T_U8, |v| v.u8 = x),
        Value::U16(x) => prim(&T_U16, |v| v.u16 = x),
        Value::U32(x) => prim(&T_U32, |v| v.u32 = x),
        Value::U64(x) => prim(&T_U64, |v| v.u64 = x),
        Value::Usize(x) => prim(&T_U64, |v| v.u64 = x as u64),
        Value::F32(x) => prim(&T_F32, |v| v.f = x),
        Value::F64(x) => prim(&T_F64, |v| v.d = x),
        Value::Str(s) if s.len() < u32::MAX as usize => {
            let len = s.len();
            let mut b = Vec::with_capacity(len + 1);
            b.extend_from_slice(s.as_bytes());
            b.push(0);
            let p = Box::into_raw(b.into_boxed_slice()) as *mut u8;
            FutoInBinaryValue {
                type_: &T_STR,
                v: data(|v| v.p = p as *const c_void),
                custom_data: std::ptr::null_mut(),
                length: len as u32,
            }
        }
        Value::Bytes(b) if b.len() <= u32::MAX as usize => {
            let len = b.len();
            let p = Box::into_raw(b) as *mut u8;
            FutoInBinaryValue {
                type_: &T_BYTES,
                v: data(|v| v.p = p as *const c_void),
                custom_data: std::ptr::null_mut(),
                length: len as u32,
            }
        }
        Value::Custom(b) if (*b).type_id() == std::any::TypeId::of::<BinaryValue>() => {
            match b.into_any().downcast::<BinaryValue>() {
                Ok(bv) => bv.into_raw(),
                Err(_) => unreachable!("type id checked"),
            }
        }
        // Anything else (a custom Rust value, or a string or byte vector
        // longer than a C length can say) stays a Rust value.
        other => {
            let b: Box<dyn CustomValue> = match other {
                Value::Custom(b) => b,
                Value::Small(v) => v.into_boxed(),
                Value::Str(s) => Box::new(s.into_string()),
                Value::Bytes(b) => Box::new(b.into_vec()),
                _ => unreachable!("primitives handled above"),
            };
            FutoInBinaryValue {
                type_: &T_RUST,
                v: data(|_| ()),
                custom_data: Box::into_raw(Box::new(b)) as *mut c_void,
                length: 0,
            }
        }
    }
}

/// Resets every slot (what the callback did not move out).
pub(crate) fn reset_all(a: &mut FutoInArgs) {
    for s in &mut a.args {
        // SAFETY: the slots hold values made by `to_c` or moved back in
        // by C as the header allows.
        unsafe { reset(s) };
    }
}

/// A NUL-terminated C string argument, or an error naming it.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
pub(crate) unsafe fn c_str<'a>(p: *const std::ffi::c_char, what: &str) -> Result<&'a str, Error> {
    if p.is_null() {
        return Err(Error::internal(format!("{what}: NULL")));
    }
    // SAFETY: caller's contract.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| Error::internal(format!("{what}: not valid UTF-8")))
}
