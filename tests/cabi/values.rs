//! Values through the C interface: a BOOL whose byte is not 0 or 1, a
//! Rust value in C args whose `Drop` panics, STRING16 / STRING32 data at
//! any alignment, and every payload byte of values given to C set.
//!
//! Regression tests: each guards against a defect fixed in the C
//! interface. Each drives the function tables as a C program would and
//! states the documented result.

#![warn(clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_op_in_unsafe_fn)]

use crate::fixture::*;
use futoin_asyncsteps::cabi::types::*;
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Mutex;

// ---------------------------------------------------------------------------
// BOOL values whose byte is not 0 or 1
// ---------------------------------------------------------------------------

static BOOL_T: FutoInType = FutoInType {
    flags: FTN_TYPE_BOOL,
    cleanup: None,
};

/// The byte `give_bool` writes into its BOOL.
static BOOL_BYTE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

unsafe extern "C" fn give_bool(bsi: *mut FutoInAsyncSteps, _: *mut c_void, _: *const FutoInArgs) {
    let mut out = FutoInArgs::EMPTY;
    out.args[0].type_ = &BOOL_T;
    // A C bool written through another member, as C code may do.
    out.args[0].v.u8 = BOOL_BYTE.load(SeqCst);
    call!(bsi, success(bsi, &mut out));
}

unsafe extern "C" fn rust_takes_bool(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    args: *const FutoInArgs,
) {
    // SAFETY: the handle and args this callback got.
    unsafe {
        futoin_asyncsteps::cabi::wrap_step(bsi, args, |s, (v,): (bool,)| {
            // A valid Rust bool's byte is 0 or 1.
            let byte: u8 = std::hint::black_box(v).into();
            send(data, format!("rust {v} byte {byte}"));
            s.success((v,))
        })
    };
}

unsafe extern "C" fn c_takes_bool(
    _: *mut FutoInAsyncSteps,
    data: *mut c_void,
    args: *const FutoInArgs,
) {
    // SAFETY: the args this callback got: one BOOL.
    let byte = unsafe { (*args).args[0].v.u8 };
    send(data, format!("c byte {byte}"));
}

fn bool_through_steps(byte: u8) -> Vec<String> {
    BOOL_BYTE.store(byte, SeqCst);
    let fx = Fixture::new();
    let d = fx.d();
    call!(fx.root, add(fx.root, d, Some(give_bool), None));
    call!(
        fx.root,
        add(fx.root, d, Some(rust_takes_bool), Some(report_error))
    );
    call!(fx.root, add(fx.root, d, Some(give_bool), None));
    call!(fx.root, add(fx.root, d, Some(c_takes_bool), None));
    call!(fx.root, add(fx.root, d, Some(report_ok), None));
    fx.execute();
    fx.until_end(SECS)
}

/// A BOOL whose byte is 2 (or 255) is true, as in C: a Rust step gets
/// `true` (byte 1), and a C step gets byte 1 after the runtime.
#[test]
fn bool_byte_other_than_0_or_1_is_true() {
    for byte in [2, 255] {
        assert_eq!(
            bool_through_steps(byte),
            ["rust true byte 1", "c byte 1", "ok"],
            "byte {byte}"
        );
    }
    assert_eq!(
        bool_through_steps(1),
        ["rust true byte 1", "c byte 1", "ok"]
    );
    assert_eq!(
        bool_through_steps(0),
        ["rust false byte 0", "c byte 0", "ok"]
    );
}

// ---------------------------------------------------------------------------
// A Rust value in C args whose Drop panics
// ---------------------------------------------------------------------------

struct Bomb;

impl futoin_asyncsteps::ArgValue for Bomb {}

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("Bomb dropped");
    }
}

unsafe extern "C" fn rust_gives_bomb(
    bsi: *mut FutoInAsyncSteps,
    _: *mut c_void,
    args: *const FutoInArgs,
) {
    // SAFETY: the handle and args this callback got.
    unsafe { futoin_asyncsteps::cabi::wrap_step(bsi, args, |s, ()| s.success((Bomb,))) };
}

unsafe extern "C" fn c_leaves_args(
    _: *mut FutoInAsyncSteps,
    data: *mut c_void,
    args: *const FutoInArgs,
) {
    // SAFETY: the args this callback got.
    let flags = unsafe { (*(*args).args[0].type_).flags };
    send(data, format!("C step got flags {flags:#04x}"));
}

/// The args left in a C step are reset when it returns: the Rust value's
/// cleanup drops it, and its panic must not reach C (which aborts).
#[test]
fn panicking_drop_of_a_rust_value_reset_after_a_c_step() {
    if ran_in_child("values::panicking_drop_of_a_rust_value_reset_after_a_c_step") {
        return;
    }
    let fx = Fixture::new();
    let d = fx.d();
    call!(fx.root, add(fx.root, d, Some(rust_gives_bomb), None));
    call!(fx.root, add(fx.root, d, Some(c_leaves_args), None));
    call!(fx.root, add(fx.root, d, Some(report_ok), None));
    fx.execute();
    assert_eq!(fx.until_end(SECS), ["C step got flags 0x01", "ok"]);
}

/// A value C moved out of its args.
struct Moved(FutoInBinaryValue);

// SAFETY: the runtime's Rust values given to C may be cleaned up on any
// thread (their types are `Send`).

unsafe impl Send for Moved {}

/// Where a moved-out value goes (see `c_moves_value_out`).
static MOVED: Mutex<Option<Moved>> = Mutex::new(None);

unsafe extern "C" fn c_moves_value_out(
    _: *mut FutoInAsyncSteps,
    data: *mut c_void,
    args: *const FutoInArgs,
) {
    let args = args as *mut FutoInArgs;
    // SAFETY: the args this callback got; moving a value out (copy it,
    // set the slot's type to NULL) is allowed by the header.
    let v = unsafe {
        let slot = &mut (*args).args[0];
        let v = std::ptr::read(slot);
        slot.type_ = std::ptr::null();
        v
    };
    *MOVED.lock().unwrap() = Some(Moved(v));
    send(data, "moved");
}

/// The same value moved out by C and cleaned up later by C itself (what
/// `futoin_reset_binval` does), on a thread of C's.
#[test]
fn panicking_drop_of_a_rust_value_reset_by_c() {
    if ran_in_child("values::panicking_drop_of_a_rust_value_reset_by_c") {
        return;
    }
    let fx = Fixture::new();
    let d = fx.d();
    call!(fx.root, add(fx.root, d, Some(rust_gives_bomb), None));
    call!(fx.root, add(fx.root, d, Some(c_moves_value_out), None));
    call!(fx.root, add(fx.root, d, Some(report_ok), None));
    fx.execute();
    assert_eq!(fx.until_end(SECS), ["moved", "ok"]);
    let Moved(mut v) = MOVED.lock().unwrap().take().expect("moved");
    // SAFETY: the runtime's own type for the value, its cleanup run once.
    let cleanup = unsafe { (*v.type_).cleanup }.expect("a Rust value has a cleanup");
    // SAFETY: as above.
    unsafe { cleanup(&mut v) };
    send(d, "cleaned up");
    assert_eq!(fx.until_end(QUIET), ["cleaned up"]);
}

// ---------------------------------------------------------------------------
// STRING16 / STRING32 data at any alignment
// ---------------------------------------------------------------------------

static S16: FutoInType = FutoInType {
    flags: FTN_TYPE_STRING16,
    cleanup: None,
};

static S32: FutoInType = FutoInType {
    flags: FTN_TYPE_STRING32,
    cleanup: None,
};

/// Bytes at an address aligned to 4, so that one byte in is misaligned
/// for 2- and 4-byte units.
#[repr(C, align(4))]
struct Aligned<const N: usize>([u8; N]);

/// "hi" as UTF-16 and as NUL-terminated UTF-32 (native order), one byte in.
static BUF16: Aligned<5> = {
    let (h, i) = ((b'h' as u16).to_ne_bytes(), (b'i' as u16).to_ne_bytes());
    Aligned([0, h[0], h[1], i[0], i[1]])
};

static BUF32: Aligned<13> = {
    let (h, i) = ((b'h' as u32).to_ne_bytes(), (b'i' as u32).to_ne_bytes());
    Aligned([
        0, h[0], h[1], h[2], h[3], i[0], i[1], i[2], i[3], 0, 0, 0, 0,
    ])
};

unsafe extern "C" fn give_misaligned(
    bsi: *mut FutoInAsyncSteps,
    _: *mut c_void,
    _: *const FutoInArgs,
) {
    let mut out = FutoInArgs::EMPTY;
    // STRING16 counted (2 units), STRING32 NUL-terminated (length 0).
    let slots = [
        (&S16, BUF16.0.as_ptr().wrapping_add(1), 2u32),
        (&S32, BUF32.0.as_ptr().wrapping_add(1), 0u32),
    ];
    for (i, (t, p, n)) in slots.into_iter().enumerate() {
        assert_eq!(p as usize % 2, 1, "misaligned on purpose");
        out.args[i].type_ = t;
        out.args[i].v.p = p.cast_mut().cast();
        out.args[i].length = n;
    }
    call!(bsi, success(bsi, &mut out));
}

unsafe extern "C" fn read_strings(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    a: *const FutoInArgs,
) {
    // SAFETY: the args the runtime passed, valid while this runs.
    let a = unsafe { &*a };
    let mut got = Vec::new();
    for slot in &a.args[..2] {
        // SAFETY: a type pointer the runtime set (a string type here).
        let flags = unsafe { (*slot.type_).flags };
        // SAFETY: string slots hold a pointer; the runtime's copies are
        // NUL-terminated UTF-8 (STRING) as the header says for results.
        let text = unsafe { std::ffi::CStr::from_ptr(slot.v.p.cast()) };
        got.push(format!("{flags:#04x} {}", text.to_string_lossy()));
    }
    send(data, got.join(", "));
    call!(bsi, success(bsi, null_mut()));
}

/// The header puts no alignment rule on string data (a STRING16 may sit
/// at an odd offset of a wire buffer): such data is read, not a crash
/// (it was an aborting precondition failure, undefined in release).
#[test]
fn misaligned_string16_and_string32_are_read() {
    if ran_in_child("values::misaligned_string16_and_string32_are_read") {
        return;
    }
    let fx = Fixture::new();
    let (root, d) = (fx.root, fx.d());
    call!(
        root,
        add(root, d, Some(give_misaligned), Some(report_error))
    );
    call!(root, add(root, d, Some(read_strings), Some(report_error)));
    call!(root, add(root, d, Some(report_ok), None));
    fx.execute();
    let got = fx.until_end(SECS);
    // Both arrive as STRING (0x02), UTF-8.
    assert_eq!(got, ["0x02 hi, 0x02 hi", "ok"]);
}

// ---------------------------------------------------------------------------
// Values given to C: every byte of the payload is set
// ---------------------------------------------------------------------------

/// Leaves non-zero bytes where the next callbacks' frames will be.
unsafe extern "C" fn dirty_the_stack(
    _: *mut FutoInAsyncSteps,
    _: *mut c_void,
    _: *const FutoInArgs,
) {
    let mut junk = [0xA5u8; 16 * 1024];
    std::hint::black_box(&mut junk);
}

unsafe extern "C" fn rust_gives_signed(
    bsi: *mut FutoInAsyncSteps,
    _: *mut c_void,
    args: *const FutoInArgs,
) {
    // SAFETY: the handle and args this callback got.
    unsafe {
        futoin_asyncsteps::cabi::wrap_step(bsi, args, |s, ()| s.success((true, -1i8, -2i16, -3i32)))
    };
}

unsafe extern "C" fn rust_gives_unsigned(
    bsi: *mut FutoInAsyncSteps,
    _: *mut c_void,
    args: *const FutoInArgs,
) {
    // SAFETY: the handle and args this callback got.
    unsafe {
        futoin_asyncsteps::cabi::wrap_step(bsi, args, |s, ()| {
            s.success((7u8, 0xFFFEu16, 1.0f32, 4_000_000_000u32))
        })
    };
}

/// Reports the four payloads as C reads the whole union.
unsafe extern "C" fn c_reads_u64(
    _: *mut FutoInAsyncSteps,
    data: *mut c_void,
    args: *const FutoInArgs,
) {
    // SAFETY: the args this callback got: four values, which C may read
    // whole.
    let raw = unsafe { (*args).args.each_ref().map(|a| a.v.u64) };
    let v: Vec<String> = raw.iter().map(|x| format!("{x:#x}")).collect();
    send(data, v.join(" "));
}

/// A primitive made from a Rust value has its 8 payload bytes set: the
/// value, zero-extended (C may read the union through `u64`).
#[test]
fn values_given_to_c_have_every_payload_byte_set() {
    let fx = Fixture::new();
    let (root, d) = (fx.root, fx.d());
    for give in [rust_gives_signed, rust_gives_unsigned] {
        call!(root, add(root, d, Some(dirty_the_stack), None));
        call!(root, add(root, d, Some(give), None));
        call!(root, add(root, d, Some(c_reads_u64), None));
    }
    call!(root, add(root, d, Some(report_ok), None));
    fx.execute();
    assert_eq!(
        fx.until_end(SECS),
        [
            "0x1 0xff 0xfffe 0xfffffffd",
            "0x7 0xfffe 0x3f800000 0xee6b2800",
            "ok"
        ]
    );
}
