//! Part 1 of the fuzzing: args decoding (`args_decoding_never_crashes_or_leaks`,
//! see the parent module).

use super::*;

// ---------------------------------------------------------------------------
// Part 1: args decoding
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Units {
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
}

/// How a string says where it ends.
#[derive(Clone, Copy, Debug)]
enum Term {
    /// `length` code units (no NUL after them).
    Len,
    /// `length` 0: up to the first NUL.
    Nul,
    /// `p` NULL, `length` 0: the empty string.
    NullPtr,
    /// `p` NULL with a length: refused.
    NullPtrLen(u32),
}

#[derive(Clone, Debug)]
enum Payload {
    /// A primitive (or a value of unknown flags, never read).
    Bits(u64),
    Str(Units, Term),
    /// An array (`p` into `ARRAY_MEM`, or NULL) or a custom object (`p`
    /// anything: opaque).
    Pass {
        p: Option<u16>,
        raw: u64,
        length: u32,
    },
}

#[derive(Clone, Debug)]
struct Slot {
    flags: u8,
    cleanup: bool,
    payload: Payload,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Class {
    Unknown,
    Prim,
    Str,
    Array,
    Custom,
}

/// The header's reading of type flags.
fn class(flags: u8) -> Class {
    let (base, complex) = (flags & FTN_BASE_TYPE_MASK, flags & FTN_COMPLEX_TYPE_MASK);
    match (complex, base) {
        (FTN_TYPE_ARRAY, b) if b != 0 => Class::Array,
        (0, FTN_TYPE_CUSTOM_OBJECT) => Class::Custom,
        (0, FTN_TYPE_STRING..=FTN_TYPE_STRING32) => Class::Str,
        (0, b) if b >= FTN_TYPE_BOOL => Class::Prim,
        _ => Class::Unknown,
    }
}

/// Where `success()` is called.
#[derive(Clone, Copy, Debug)]
enum SendMode {
    /// In the step's callback.
    Inline,
    /// After waitExternal(), from a thread that runs no loop.
    Thread,
    /// After waitExternal(), from the loop (a sched_immediate callback).
    Sched,
}

/// What a receiving step does with its args (bit i of a mask: slot i).
#[derive(Clone, Copy, Debug)]
enum Recv {
    /// Leaves them: the runtime resets them.
    Keep,
    /// Moves these out (and resets them itself, as C would).
    MoveOut(u8),
    /// Moves these out, then forwards the rest with success().
    Forward(u8),
}

#[derive(Clone, Debug)]
struct ArgsCase {
    slots: [Option<Slot>; 4],
    send: SendMode,
    recv1: Recv,
    recv2: Recv,
}

fn units(base: u8) -> BoxedStrategy<Units> {
    match base {
        FTN_TYPE_STRING => prop_oneof![
            3 => any::<String>().prop_map(|s| Units::U8(s.into_bytes())),
            3 => vec(any::<u8>(), 0..12).prop_map(Units::U8),
            2 => vec(
                prop_oneof![
                    Just(vec![0xED, 0xA0, 0x80]), // an encoded surrogate
                    Just(vec![0xC0, 0x80]),       // overlong NUL
                    Just(vec![0xE2, 0x82]),       // truncated
                    Just(vec![0xF4, 0x90, 0x80, 0x80]), // past U+10FFFF
                    Just(vec![0x80]),
                    Just(vec![0xFF]),
                    "[a-z\u{e9}\u{1F600}]".prop_map(String::into_bytes),
                ],
                0..5
            )
            .prop_map(|v| Units::U8(v.concat())),
        ]
        .boxed(),
        FTN_TYPE_STRING16 => prop_oneof![
            3 => any::<String>().prop_map(|s| Units::U16(s.encode_utf16().collect())),
            2 => vec(any::<u16>(), 0..10).prop_map(Units::U16),
            3 => vec(prop_oneof![0xD800u16..0xE000, 0x20u16..0x80, Just(0u16)], 0..8)
                .prop_map(Units::U16),
        ]
        .boxed(),
        _ => prop_oneof![
            3 => any::<String>().prop_map(|s| Units::U32(s.chars().map(u32::from).collect())),
            2 => vec(any::<u32>(), 0..8).prop_map(Units::U32),
            3 => vec(
                prop_oneof![
                    0xD800u32..0xE000,
                    0x10_FFFEu32..0x11_0002,
                    0x20u32..0x80,
                    Just(0u32)
                ],
                0..8
            )
            .prop_map(Units::U32),
        ]
        .boxed(),
    }
}

fn term() -> impl Strategy<Value = Term> {
    prop_oneof![
        4 => Just(Term::Len),
        3 => Just(Term::Nul),
        1 => Just(Term::NullPtr),
        1 => (1u32..6).prop_map(Term::NullPtrLen),
    ]
}

fn slot_for(flags: u8) -> BoxedStrategy<Slot> {
    let cleanup = prop::bool::weighted(0.85);
    match class(flags) {
        Class::Prim | Class::Unknown => (cleanup, any::<u64>())
            .prop_map(move |(cleanup, x)| Slot {
                flags,
                cleanup,
                // A C bool is 0 or 1.
                payload: Payload::Bits(if flags == FTN_TYPE_BOOL { x & 1 } else { x }),
            })
            .boxed(),
        Class::Str => (cleanup, units(flags), term())
            .prop_map(move |(cleanup, u, t)| Slot {
                flags,
                cleanup,
                payload: Payload::Str(u, t),
            })
            .boxed(),
        Class::Array | Class::Custom => (
            cleanup,
            prop::option::weighted(0.8, 0u16..512),
            any::<u64>(),
            prop_oneof![Just(0u32), 1u32..64, Just(u32::MAX)],
        )
            .prop_map(move |(cleanup, p, raw, length)| Slot {
                flags,
                cleanup,
                payload: Payload::Pass { p, raw, length },
            })
            .boxed(),
    }
}

fn slot() -> impl Strategy<Value = Slot> {
    prop_oneof![
        1 => any::<u8>().prop_flat_map(slot_for),
        5 => (FTN_TYPE_STRING..=FTN_TYPE_STRING32).prop_flat_map(slot_for),
        3 => (FTN_TYPE_BOOL..=FTN_TYPE_DOUBLE).prop_flat_map(slot_for),
        2 => (0x11u8..=0x1F).prop_flat_map(slot_for),
        1 => Just(FTN_TYPE_CUSTOM_OBJECT).prop_flat_map(slot_for),
    ]
}

/// Four slots: mostly the first `k` set; sometimes any of them (gaps).
fn slots() -> impl Strategy<Value = [Option<Slot>; 4]> {
    prop_oneof![
        3 => ([slot(), slot(), slot(), slot()], 0usize..=4).prop_map(|(s, k)| {
            let mut i = 0;
            s.map(|v| {
                i += 1;
                (i <= k).then_some(v)
            })
        }),
        1 => [
            prop::option::of(slot()),
            prop::option::of(slot()),
            prop::option::of(slot()),
            prop::option::of(slot()),
        ],
    ]
}

fn recv() -> impl Strategy<Value = Recv> {
    prop_oneof![
        2 => Just(Recv::Keep),
        2 => (0u8..16).prop_map(Recv::MoveOut),
        3 => prop_oneof![Just(0u8), 0u8..16].prop_map(Recv::Forward),
    ]
}

fn args_case() -> impl Strategy<Value = ArgsCase> {
    (
        slots(),
        prop_oneof![
            3 => Just(SendMode::Inline),
            1 => Just(SendMode::Thread),
            1 => Just(SendMode::Sched),
        ],
        recv(),
        prop_oneof![Just(Recv::Keep), (0u8..16).prop_map(Recv::MoveOut)],
    )
        .prop_map(|(slots, send, recv1, recv2)| ArgsCase {
            slots,
            send,
            recv1,
            recv2,
        })
}

/// A value as a C step receives it.
#[derive(Clone, Debug, PartialEq)]
enum Got {
    /// A primitive: its flags and its bits (zero-extended).
    Prim { flags: u8, bits: u64 },
    /// A STRING, checked to be NUL-terminated UTF-8.
    Str(String),
    /// An array or a custom object: exactly what was sent.
    Pass {
        ty: usize,
        bits: u64,
        custom: u64,
        length: u32,
    },
}

/// The bits of a primitive of base `base` in the low bytes of `x`.
fn prim_bits(base: u8, x: u64) -> u64 {
    match base {
        FTN_TYPE_BOOL | FTN_TYPE_INT8 | FTN_TYPE_UINT8 => x & 0xFF,
        FTN_TYPE_INT16 | FTN_TYPE_UINT16 => x & 0xFFFF,
        FTN_TYPE_INT32 | FTN_TYPE_UINT32 | FTN_TYPE_FLOAT => x & 0xFFFF_FFFF,
        _ => x,
    }
}

/// Reads slot `v` as a C step would.
fn read_got(v: &FutoInBinaryValue) -> Result<Got, String> {
    // SAFETY: a slot the runtime filled: NULL or a live type.
    let Some(t) = (unsafe { v.type_.as_ref() }) else {
        return Err("empty slot".into());
    };
    let flags = t.flags;
    match class(flags) {
        Class::Prim => {
            // SAFETY: the member of the union the flags name (the others
            // may be uninitialised).
            let bits = unsafe {
                match flags {
                    FTN_TYPE_BOOL => v.v.b as u64,
                    FTN_TYPE_INT8 => v.v.i8 as u8 as u64,
                    FTN_TYPE_UINT8 => v.v.u8 as u64,
                    FTN_TYPE_INT16 => v.v.i16 as u16 as u64,
                    FTN_TYPE_UINT16 => v.v.u16 as u64,
                    FTN_TYPE_INT32 => v.v.i32 as u32 as u64,
                    FTN_TYPE_UINT32 => v.v.u32 as u64,
                    FTN_TYPE_FLOAT => v.v.f.to_bits() as u64,
                    FTN_TYPE_DOUBLE => v.v.d.to_bits(),
                    FTN_TYPE_INT64 => v.v.i64 as u64,
                    _ => v.v.u64,
                }
            };
            Ok(Got::Prim { flags, bits })
        }
        Class::Str if flags == FTN_TYPE_STRING => {
            // SAFETY: a STRING given to C: `length` bytes and a NUL.
            let b = unsafe {
                let p = v.v.p as *const u8;
                if p.is_null() {
                    return Err("STRING with a NULL pointer".into());
                }
                if *p.add(v.length as usize) != 0 {
                    return Err("STRING not NUL-terminated".into());
                }
                std::slice::from_raw_parts(p, v.length as usize)
            };
            String::from_utf8(b.to_vec())
                .map(Got::Str)
                .map_err(|e| format!("STRING given to C is not UTF-8: {e}"))
        }
        Class::Array | Class::Custom => Ok(Got::Pass {
            ty: t as *const FutoInType as usize,
            // SAFETY: pass-through values are ours, written whole.
            bits: unsafe { v.v.u64 },
            custom: v.custom_data as u64,
            length: v.length,
        }),
        _ => Err(format!("a value of flags {flags:#04x} given to C")),
    }
}

/// The string a test buffer holds, as the header reads it.
fn decode(u: &Units, term: Term) -> Result<String, String> {
    match term {
        Term::NullPtr => return Ok(String::new()),
        Term::NullPtrLen(_) => return Err("NULL string with a length".into()),
        Term::Len | Term::Nul => {}
    }
    fn upto<T: Copy + Default + PartialEq>(v: &[T], term: Term) -> &[T] {
        match term {
            Term::Nul => &v[..v.iter().position(|c| *c == T::default()).unwrap_or(v.len())],
            _ => v,
        }
    }
    match u {
        Units::U8(v) => std::str::from_utf8(upto(v, term))
            .map(str::to_owned)
            .map_err(|e| format!("STRING is not valid UTF-8 ({e})")),
        Units::U16(v) => String::from_utf16(upto(v, term))
            .map_err(|_| "STRING16 is not valid UTF-16".to_string()),
        Units::U32(v) => upto(v, term)
            .iter()
            .map(|&c| char::from_u32(c).ok_or_else(|| format!("STRING32 has {c:#x}, not a char")))
            .collect(),
    }
}

/// The buffer of a string slot (only kept alive by the case).
type Buf = Box<dyn std::any::Any>;

/// Builds slot `s`: its buffer (if any) and its value.
fn build_slot(case: u64, s: &Slot) -> (Option<Buf>, RawVal) {
    let t = ty(s.flags, s.cleanup);
    match &s.payload {
        Payload::Bits(x) => (None, RawVal::new(case, t, *x, 0)),
        Payload::Pass { p, raw, length } => {
            let bits = match (class(s.flags), p) {
                (Class::Custom, _) => *raw,
                (_, Some(off)) => ARRAY_MEM[*off as usize..].as_ptr() as u64,
                (_, None) => 0,
            };
            (None, RawVal::new(case, t, bits, *length))
        }
        Payload::Str(u, term) => {
            if let Term::NullPtr | Term::NullPtrLen(_) = term {
                let n = match term {
                    Term::NullPtrLen(n) => *n,
                    _ => 0,
                };
                return (None, RawVal::new(case, t, 0, n));
            }
            fn prep<T: Copy + Default + PartialEq>(v: &[T], term: Term) -> (Box<[T]>, u32) {
                match term {
                    Term::Len if !v.is_empty() => (v.into(), v.len() as u32),
                    _ => {
                        let end = v.iter().position(|c| *c == T::default()).unwrap_or(v.len());
                        let mut b = v[..end].to_vec();
                        b.push(T::default());
                        (b.into_boxed_slice(), 0)
                    }
                }
            }
            let (buf, p, n) = match u {
                Units::U8(v) => {
                    let (b, n) = prep(v, *term);
                    let p = b.as_ptr() as u64;
                    (Box::new(b) as Buf, p, n)
                }
                Units::U16(v) => {
                    let (b, n) = prep(v, *term);
                    let p = b.as_ptr() as u64;
                    (Box::new(b) as Buf, p, n)
                }
                Units::U32(v) => {
                    let (b, n) = prep(v, *term);
                    let p = b.as_ptr() as u64;
                    (Box::new(b) as Buf, p, n)
                }
            };
            (Some(buf), RawVal::new(case, t, p, n))
        }
    }
}

/// What the runtime must make of the slots: the values the next step gets,
/// or the `error_info` of the `InternalError`.
fn model(slots: &[Option<(Slot, RawVal)>]) -> Result<Vec<Got>, String> {
    let mut ended = None;
    let mut out = Vec::new();
    for (i, s) in slots.iter().enumerate() {
        let Some((s, raw)) = s else {
            ended.get_or_insert(i);
            continue;
        };
        if let Some(e) = ended {
            return Err(format!("args: slot {i}: set after the empty slot {e}"));
        }
        let got = match (class(s.flags), &s.payload) {
            (Class::Unknown, _) => Err(format!("unknown type flags {:#04x}", s.flags)),
            (Class::Prim, Payload::Bits(x)) => Ok(Got::Prim {
                flags: s.flags,
                bits: prim_bits(s.flags, *x),
            }),
            (Class::Str, Payload::Str(u, t)) => decode(u, *t).map(Got::Str),
            (Class::Array | Class::Custom, Payload::Pass { .. }) => Ok(Got::Pass {
                ty: raw.ty,
                bits: raw.bits,
                custom: raw.id,
                length: raw.length,
            }),
            _ => unreachable!("payloads follow the class"),
        };
        out.push(got.map_err(|m| format!("args: slot {i}: {m}"))?);
    }
    Ok(out)
}

/// (stage, code, error_info) of each error handler call.
type Handled = Vec<(&'static str, String, Option<String>)>;

/// What one args case recorded.
#[derive(Default, Debug)]
struct Rec1 {
    recv1: Option<Vec<Result<Got, String>>>,
    recv2: Option<Vec<Result<Got, String>>>,
    /// (stage, code, error_info) of each error handler call.
    handled: Handled,
    ends: Vec<String>,
    violations: Vec<String>,
}

struct Ctx1 {
    spec: ArgsCase,
    raw: [Option<RawVal>; 4],
    _bufs: Vec<Buf>,
    rec: Mutex<Rec1>,
    done: Mutex<Sender<()>>,
    /// The waiting step, for a completion from the loop.
    waiting: AtomicUsize,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Ctx1 {
    fn violation(&self, v: impl Into<String>) {
        lock(&self.rec).violations.push(v.into());
    }
    fn end(&self, how: String) {
        lock(&self.rec).ends.push(how);
        let _ = lock(&self.done).send(());
    }
    /// The case's args, made again for each send.
    fn args(&self) -> FutoInArgs {
        let mut a = FutoInArgs::EMPTY;
        for (i, r) in self.raw.iter().enumerate() {
            if let Some(r) = r {
                a.args[i] = r.to_c();
            }
        }
        a
    }
    /// success() with the case's args on `bsi`; the args must come back
    /// reset.
    fn send(&self, bsi: *mut FutoInAsyncSteps) {
        let mut a = self.args();
        call!(bsi, success(bsi, &mut a));
        if a.args.iter().any(|v| !v.type_.is_null()) {
            self.violation("success() left values in the args");
        }
    }
}

/// Ctx1 of a callback's `data`.
///
/// # Safety
/// `data` is the `Ctx1` the case passed, alive until the runtime is freed.
unsafe fn ctx1<'a>(data: *mut c_void) -> &'a Ctx1 {
    // SAFETY: caller's contract.
    unsafe { &*(data as *const Ctx1) }
}

unsafe extern "C" fn a_send(bsi: *mut FutoInAsyncSteps, data: *mut c_void, _: *const FutoInArgs) {
    // SAFETY: the case's context.
    let c = unsafe { ctx1(data) };
    match c.spec.send {
        SendMode::Inline => c.send(bsi),
        SendMode::Thread => {
            call!(bsi, wait_external(bsi));
            let (b, d) = (Addr::of(bsi), Addr::of(c));
            *lock(&c.thread) = Some(std::thread::spawn(move || {
                // SAFETY: the context outlives this thread (joined before
                // the case ends); the handle is never freed.
                unsafe { ctx1(d.ptr()) }.send(b.ptr());
            }));
        }
        SendMode::Sched => {
            call!(bsi, wait_external(bsi));
            c.waiting.store(bsi as usize, SeqCst);
            let h = call!(bsi, sched_immediate(bsi, data, Some(a_send_later)));
            if call!(bsi, sched_is_valid(bsi, &h as *const _ as *mut _)) != 1 {
                c.violation("a task just scheduled is not valid");
            }
        }
    }
}

unsafe extern "C" fn a_send_later(data: *mut c_void) {
    // SAFETY: the case's context.
    let c = unsafe { ctx1(data) };
    c.send(c.waiting.load(SeqCst) as *mut FutoInAsyncSteps);
}

unsafe extern "C" fn a_handler(bsi: *mut FutoInAsyncSteps, data: *mut c_void, code: *const c_char) {
    // SAFETY: the case's context.
    let c = unsafe { ctx1(data) };
    let stage = if lock(&c.rec).recv1.is_some() {
        "recv1"
    } else {
        "send"
    };
    let info = error_info(bsi);
    lock(&c.rec).handled.push((stage, text(code), info));
}

/// A receiving step: reads the four slots, then does what `r` says.
fn receive(
    bsi: *mut FutoInAsyncSteps,
    args: *const FutoInArgs,
    r: Recv,
) -> Vec<Result<Got, String>> {
    // SAFETY: the args the runtime gave this callback; the header lets the
    // callback move values out of them (and forward them).
    let a = unsafe { &mut *(args as *mut FutoInArgs) };
    let got: Vec<Result<Got, String>> = a
        .args
        .iter()
        .take_while(|v| !v.type_.is_null())
        .map(read_got)
        .collect();
    if let Recv::MoveOut(mask) | Recv::Forward(mask) = r {
        for (i, v) in a.args.iter_mut().enumerate() {
            if mask & (1 << i) != 0 && !v.type_.is_null() {
                // Move out: copy, empty the slot, then reset our copy.
                let mut mine = std::mem::replace(v, FutoInBinaryValue::EMPTY);
                reset_binval(&mut mine);
            }
        }
    }
    if let Recv::Forward(_) = r {
        call!(bsi, success(bsi, a));
    }
    got
}

unsafe extern "C" fn a_recv1(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    args: *const FutoInArgs,
) {
    // SAFETY: the case's context.
    let c = unsafe { ctx1(data) };
    // Recorded first: a forward error reaches the handler during success().
    let peek: Vec<Result<Got, String>> = {
        // SAFETY: the args of this callback.
        let a = unsafe { &*args };
        a.args
            .iter()
            .take_while(|v| !v.type_.is_null())
            .map(read_got)
            .collect()
    };
    lock(&c.rec).recv1 = Some(peek);
    receive(bsi, args, c.spec.recv1);
    // SAFETY: as above.
    if unsafe { &*args }.args.iter().any(|v| !v.type_.is_null())
        && matches!(c.spec.recv1, Recv::Forward(_))
    {
        c.violation("forwarding success() left values in the args");
    }
}

unsafe extern "C" fn a_recv2(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    args: *const FutoInArgs,
) {
    // SAFETY: the case's context.
    let c = unsafe { ctx1(data) };
    let got = receive(bsi, args, c.spec.recv2);
    lock(&c.rec).recv2 = Some(got);
}

unsafe extern "C" fn a_last(_: *mut FutoInAsyncSteps, data: *mut c_void, _: *const FutoInArgs) {
    // SAFETY: the case's context.
    unsafe { ctx1(data) }.end("ok".into());
}

unsafe extern "C" fn a_unhandled(_: *mut FutoInAsyncSteps, data: *mut c_void, code: *const c_char) {
    // SAFETY: the case's context.
    unsafe { ctx1(data) }.end(text(code));
}

/// What the flow must record for `spec` with values `expected`.
fn expected_outcome(
    spec: &ArgsCase,
    expected: &Result<Vec<Got>, String>,
) -> (Option<Vec<Got>>, Option<Vec<Got>>, Handled, String) {
    const IE: &str = "InternalError";
    let vals = match expected {
        Err(m) => {
            return (
                None,
                None,
                vec![("send", IE.into(), Some(m.clone()))],
                IE.into(),
            )
        }
        Ok(v) => v.clone(),
    };
    let Recv::Forward(mask) = spec.recv1 else {
        return (Some(vals), Some(vec![]), vec![], "ok".into());
    };
    // The forwarded slots: the received ones, minus those moved out.
    let mut ended = None;
    let mut fwd = Vec::new();
    for i in 0..4 {
        let set = i < vals.len() && mask & (1 << i) == 0;
        if !set {
            ended.get_or_insert(i);
        } else if let Some(e) = ended {
            let m = format!("args: slot {i}: set after the empty slot {e}");
            return (
                Some(vals),
                None,
                vec![("recv1", IE.into(), Some(m))],
                IE.into(),
            );
        } else {
            fwd.push(vals[i].clone());
        }
    }
    (Some(vals), Some(fwd), vec![], "ok".into())
}

fn run_args_case(spec: &ArgsCase, cov: &Coverage) -> Result<(), TestCaseError> {
    let case = NEXT_CASE.fetch_add(1, SeqCst);
    let mut bufs = Vec::new();
    let mut raw = [None; 4];
    let mut built = Vec::new();
    for (i, s) in spec.slots.iter().enumerate() {
        match s {
            Some(s) => {
                let (b, r) = build_slot(case, s);
                bufs.extend(b);
                raw[i] = Some(r);
                built.push(Some((s.clone(), r)));
            }
            None => built.push(None),
        }
    }
    let expected = model(&built);
    let (tx, rx) = channel();
    let ctx = Box::new(Ctx1 {
        spec: spec.clone(),
        raw,
        _bufs: bufs,
        rec: Mutex::new(Rec1::default()),
        done: Mutex::new(tx),
        waiting: AtomicUsize::new(0),
        thread: Mutex::new(None),
    });
    let data = &*ctx as *const Ctx1 as *mut c_void;
    let rt = new_runtime(1);
    // SAFETY: a live runtime.
    let root = unsafe { futoin_asyncsteps_new(rt) };
    call!(root, add(root, data, Some(a_send), Some(a_handler)));
    call!(root, add(root, data, Some(a_recv1), Some(a_handler)));
    call!(root, add(root, data, Some(a_recv2), None));
    call!(root, add(root, data, Some(a_last), None));
    call!(root, execute(root, data, Some(a_unhandled)));
    let ended = rx.recv_timeout(hang()).is_ok();
    call!(root, free(root));
    if let Some(t) = lock(&ctx.thread).take() {
        t.join().expect("the sending thread");
    }
    free_runtime(rt);
    let leaks = settle_values(case);
    let rec = std::mem::take(&mut *lock(&ctx.rec));
    drop(ctx);

    prop_assert!(ended, "the flow did not end in {:?}: {rec:?}", hang());
    prop_assert!(rec.violations.is_empty(), "{:?}", rec.violations);
    prop_assert!(leaks.is_empty(), "{leaks:?}");
    let (r1, r2, handled, end) = expected_outcome(spec, &expected);
    let ok = |v: Option<Vec<Got>>| v.map(|v| v.into_iter().map(Ok).collect::<Vec<_>>());
    prop_assert_eq!(rec.recv1, ok(r1), "values the first step got");
    prop_assert_eq!(rec.recv2, ok(r2), "values the second step got");
    prop_assert_eq!(rec.handled, handled, "errors handled");
    prop_assert_eq!(&rec.ends, &vec![end.clone()], "flow ends");
    cov.hit(match &expected {
        Ok(v) => format!("ok with {} values", v.len()),
        Err(m) => m
            .split(": ")
            .nth(2)
            .unwrap_or(m)
            .split([' ', '('])
            .take(2)
            .collect::<Vec<_>>()
            .join(" "),
    });
    if end != "ok" && expected.is_ok() {
        cov.hit("forward with a gap");
    }
    Ok(())
}

#[test]
fn args_decoding_never_crashes_or_leaks() {
    let (mut runner, cases, seed) = runner(4000, 1);
    let cov = Coverage::default();
    let ran = AtomicUsize::new(0);
    let started = Instant::now();
    let res = runner.run(&args_case(), |spec| {
        ran.fetch_add(1, SeqCst);
        trace(&spec);
        let cov = cov.clone();
        bounded(move || run_args_case(&spec, &cov))
    });
    let _ = writeln!(
        std::io::stderr(),
        "cabi_fuzz args: {} cases ran ({cases} asked, seed {seed}) in {:.1?}",
        ran.load(SeqCst),
        started.elapsed()
    );
    cov.report("cabi_fuzz args");
    assert_eq!(STRAY.load(SeqCst), 0, "cleanups of values no case knows");
    if let Err(e) = res {
        panic!("{e}");
    }
}
