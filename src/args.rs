//! Success arguments: typed values passed from one step to the next.
//!
//! A step completes with up to four values ([`IntoArgs`] for tuples of up to
//! four [`ArgValue`]s); the next step declares the types it expects
//! ([`FromArgs`]). Values are stored inline in [`Args`], so primitives never
//! touch the heap. A mismatch becomes an `InternalError` whose info names the
//! expected and the given types.
//!
//! ```
//! use futoin_asyncsteps::{Args, FromArgs, IntoArgs};
//! let mut a = (7i32, String::from("x")).into_args();
//! assert_eq!(a.type_names(), "(i32, String)");
//! let (n, s) = <(i32, String)>::from_args(&mut a).unwrap();
//! assert_eq!((n, s.as_str()), (7, "x"));
//! ```

use crate::error::Error;
use std::any::Any;

mod small;
pub use small::SmallValue;
use std::fmt;
use std::mem::ManuallyDrop;

/// One success argument.
///
/// Primitives are stored inline; strings and byte vectors own a boxed slice;
/// any other type of one word or less is kept in place ([`Value::Small`]);
/// anything else is a [`Value::Custom`] box.
pub enum Value {
    /// `bool`
    Bool(bool),
    /// `i8`
    I8(i8),
    /// `i16`
    I16(i16),
    /// `i32`
    I32(i32),
    /// `i64`
    I64(i64),
    /// `u8`
    U8(u8),
    /// `u16`
    U16(u16),
    /// `u32`
    U32(u32),
    /// `u64`
    U64(u64),
    /// `usize`
    Usize(usize),
    /// `isize`
    Isize(isize),
    /// `f32`
    F32(f32),
    /// `f64`
    F64(f64),
    /// `String`
    Str(Box<str>),
    /// `Vec<u8>`
    Bytes(Box<[u8]>),
    /// Any other [`ArgValue`] type of one word or less (`char`, an
    /// `Option<Arc<T>>`, the crate's `Ready`, a small type of your own),
    /// kept in place: no allocation.
    Small(SmallValue),
    /// Any other [`ArgValue`] type, boxed: `&'static str`, `Vec<String>`,
    /// a bigger `Option<T>` and the crate's or your own bigger types.
    Custom(Box<dyn CustomValue>),
}

/// A boxed custom argument: any `Send + 'static` value that knows its type name.
///
/// Implemented for every such type; used through [`Value::Custom`].
pub trait CustomValue: Any + Send {
    /// The Rust type name of the value.
    fn type_name(&self) -> &'static str;
    /// Converts the box for downcasting.
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

impl<T: Any + Send> CustomValue for T {
    fn type_name(&self) -> &'static str {
        std::any::type_name::<T>()
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

impl Value {
    /// The Rust type name of the value, as used in mismatch messages.
    ///
    /// ```
    /// use futoin_asyncsteps::ArgValue;
    /// assert_eq!(5u8.into_value().type_name(), "u8");
    /// ```
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Bool(_) => "bool",
            Value::I8(_) => "i8",
            Value::I16(_) => "i16",
            Value::I32(_) => "i32",
            Value::I64(_) => "i64",
            Value::U8(_) => "u8",
            Value::U16(_) => "u16",
            Value::U32(_) => "u32",
            Value::U64(_) => "u64",
            Value::Usize(_) => "usize",
            Value::Isize(_) => "isize",
            Value::F32(_) => "f32",
            Value::F64(_) => "f64",
            Value::Str(_) => "String",
            Value::Bytes(_) => "Vec<u8>",
            Value::Small(v) => v.type_name(),
            Value::Custom(b) => (**b).type_name(),
        }
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(v) => write!(f, "{v:?}"),
            Value::I8(v) => write!(f, "{v}i8"),
            Value::I16(v) => write!(f, "{v}i16"),
            Value::I32(v) => write!(f, "{v}i32"),
            Value::I64(v) => write!(f, "{v}i64"),
            Value::U8(v) => write!(f, "{v}u8"),
            Value::U16(v) => write!(f, "{v}u16"),
            Value::U32(v) => write!(f, "{v}u32"),
            Value::U64(v) => write!(f, "{v}u64"),
            Value::Usize(v) => write!(f, "{v}usize"),
            Value::Isize(v) => write!(f, "{v}isize"),
            Value::F32(v) => write!(f, "{v}f32"),
            Value::F64(v) => write!(f, "{v}f64"),
            Value::Str(v) => write!(f, "{v:?}"),
            Value::Bytes(v) => write!(f, "{v:?}"),
            Value::Small(v) => write!(f, "<{}>", v.type_name()),
            Value::Custom(b) => write!(f, "<{}>", (**b).type_name()),
        }
    }
}

/// A type that can travel as a success argument.
///
/// Implemented for the primitives, `String` and `Vec<u8>` (stored inline
/// in [`Value`]), and for `char`, `&'static str`, `&'static [u8]`, and
/// `Vec<T>`, `Option<T>`, `Box<T>` and `Arc<T>` of any `Send` (and, for
/// `Arc`, `Sync`) `T`, which travel as custom values: in place when they
/// fit one word ([`Value::Small`]), boxed otherwise. A step that takes a
/// `String` also takes a `&'static str` (`s.success(("OK",))`), and one
/// that takes a `Vec<u8>` a `&'static [u8]`, copied (a byte string
/// literal is an array: `&b"raw"[..]`). An `Option<T>` is one value that
/// may be `None`, not an argument that may be missing.
///
/// A type of your own crate opts in with an empty impl and travels the
/// same way, and so do a `Vec`, `Box`, `Arc` or `Option` of it:
///
/// ```
/// use futoin_asyncsteps::{ArgValue, FromArgs, IntoArgs};
/// #[derive(Debug, PartialEq)]
/// struct User { id: u32 }
/// impl ArgValue for User {}
///
/// let mut a = (User { id: 3 },).into_args();
/// assert_eq!(<(User,)>::from_args(&mut a).unwrap().0, User { id: 3 });
/// ```
///
/// Any other type from `std` or another crate (a `HashSet`, say) cannot
/// be given that impl in your crate (Rust's orphan rule: neither the trait
/// nor the type is yours). Wrap it in a newtype of your own, or pass it in
/// a `Box` or an `Arc`:
///
/// ```
/// use futoin_asyncsteps::{ArgValue, FromArgs, IntoArgs};
/// use std::collections::HashSet;
/// use std::sync::Arc;
///
/// struct Tags(HashSet<String>);
/// impl ArgValue for Tags {}
///
/// let tags = Tags(HashSet::from([String::from("new")]));
/// let mut a = (tags, Arc::new(vec![1u64, 2])).into_args();
/// let (t, s) = <(Tags, Arc<Vec<u64>>)>::from_args(&mut a).unwrap();
/// assert!(t.0.contains("new"));
/// assert_eq!(*s, [1, 2]);
///
/// let mut a = Box::new(HashSet::from([1u8])).into_args();
/// assert!(<Box<HashSet<u8>>>::from_args(&mut a).unwrap().contains(&1));
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a step arg value (`ArgValue`)",
    note = "a type of your own travels as a step arg once it implements `ArgValue` (an empty impl); a foreign type in a newtype of yours, or in a `Box` or an `Arc` (see its docs)"
)]
pub trait ArgValue: Sized + Send + 'static {
    /// Wraps the value: in place when it is one word or less
    /// ([`Value::Small`]), boxed otherwise ([`Value::Custom`]).
    fn into_value(self) -> Value {
        in_place_or_boxed(self)
    }
    /// Unwraps the value, or gives it back when the type differs.
    fn from_value(v: Value) -> Result<Self, Value> {
        taken_in_place_or_boxed(v)
    }
    /// The name used in type mismatch messages.
    fn type_name() -> &'static str {
        std::any::type_name::<Self>()
    }
}

macro_rules! prim {
    ($($t:ty => $v:ident, $n:literal;)*) => {$(
        impl ArgValue for $t {
            #[inline]
            fn into_value(self) -> Value { Value::$v(self) }
            #[inline]
            fn from_value(v: Value) -> Result<Self, Value> {
                match v { Value::$v(x) => Ok(x), other => Err(other) }
            }
            fn type_name() -> &'static str { $n }
        }
    )*};
}

prim! {
    bool => Bool, "bool";
    i8 => I8, "i8";
    i16 => I16, "i16";
    i32 => I32, "i32";
    i64 => I64, "i64";
    u8 => U8, "u8";
    u16 => U16, "u16";
    u32 => U32, "u32";
    u64 => U64, "u64";
    usize => Usize, "usize";
    isize => Isize, "isize";
    f32 => F32, "f32";
    f64 => F64, "f64";
}

/// A step that takes a `String` also takes a `&'static str` (a literal
/// given to `success`), copied.
impl ArgValue for String {
    fn into_value(self) -> Value {
        Value::Str(self.into_boxed_str())
    }
    fn from_value(v: Value) -> Result<Self, Value> {
        match v {
            Value::Str(s) => Ok(s.into_string()),
            other => <&'static str>::from_value(other).map(str::to_owned),
        }
    }
    fn type_name() -> &'static str {
        "String"
    }
}

/// Any `Vec` of `Send` values. A `Vec<u8>` is stored as bytes
/// ([`Value::Bytes`]), and a step that takes one also takes a
/// `&'static [u8]`, copied.
impl<T: Send + 'static> ArgValue for Vec<T> {
    fn into_value(self) -> Value {
        // `Vec<u8>` is `Self` exactly when `T` is `u8`: the downcast finds
        // it without copying (or any `unsafe`).
        let mut v = Some(self);
        if let Some(bytes) = (&mut v as &mut dyn Any).downcast_mut::<Option<Vec<u8>>>() {
            if let Some(b) = bytes.take() {
                return Value::Bytes(b.into_boxed_slice());
            }
        }
        match v {
            Some(v) => in_place_or_boxed(v),
            None => unreachable!("taken only as bytes"),
        }
    }
    fn from_value(v: Value) -> Result<Self, Value> {
        if std::any::TypeId::of::<T>() != std::any::TypeId::of::<u8>() {
            return taken_in_place_or_boxed(v);
        }
        let bytes = match v {
            Value::Bytes(b) => b.into_vec(),
            other => <&'static [u8]>::from_value(other)?.to_vec(),
        };
        let mut bytes = Some(bytes);
        match (&mut bytes as &mut dyn Any).downcast_mut::<Option<Self>>() {
            Some(v) => Ok(v.take().expect("just made")),
            None => unreachable!("`T` is `u8`"),
        }
    }
    fn type_name() -> &'static str {
        if std::any::TypeId::of::<T>() == std::any::TypeId::of::<u8>() {
            "Vec<u8>"
        } else {
            std::any::type_name::<Self>()
        }
    }
}

/// The trait's default `into_value`, for impls that replace it.
fn in_place_or_boxed<T: Send + 'static>(v: T) -> Value {
    match SmallValue::new(v) {
        Ok(v) => Value::Small(v),
        Err(v) => Value::Custom(Box::new(v)),
    }
}

/// The trait's default `from_value`, for impls that replace it.
fn taken_in_place_or_boxed<T: Send + 'static>(v: Value) -> Result<T, Value> {
    match v {
        Value::Small(v) => v.take::<T>().map_err(Value::Small),
        Value::Custom(b) if (*b).type_id() == std::any::TypeId::of::<T>() => {
            match b.into_any().downcast::<T>() {
                Ok(v) => Ok(*v),
                Err(_) => unreachable!("type id checked"),
            }
        }
        other => Err(other),
    }
}

// Kept in place or boxed by the trait's default methods.
impl ArgValue for char {}
impl ArgValue for &'static str {}
impl ArgValue for &'static [u8] {}
impl<T: Send + 'static> ArgValue for Option<T> {}
impl<T: ?Sized + Send + 'static> ArgValue for Box<T> {}
impl<T: ?Sized + Send + Sync + 'static> ArgValue for std::sync::Arc<T> {}

/// Up to four success arguments, stored inline.
///
/// ```
/// use futoin_asyncsteps::{Args, IntoArgs};
/// let a = (1u8, true).into_args();
/// assert_eq!(a.len(), 2);
/// assert!(Args::new().is_empty());
/// ```
#[derive(Default)]
pub struct Args {
    // Dropped by hand (see `Drop` below): an empty register, the common
    // case, then costs one check per slot instead of four drop calls.
    vals: ManuallyDrop<[Option<Value>; 4]>,
}

impl Drop for Args {
    #[inline]
    fn drop(&mut self) {
        if self.vals.iter().any(Option::is_some) {
            drop_values(&mut self.vals);
        }
    }
}

/// Drops every value, each on its own: a value whose `Drop` panics does not
/// keep the others from being dropped, and a second panic (or one while
/// the thread unwinds) does not abort the process (see
/// `util::panic`). The first panic goes on once all are dropped.
#[cold]
#[inline(never)]
fn drop_values(vals: &mut [Option<Value>; 4]) {
    use crate::util::panic::{drop_caught, rethrow};
    let mut first = None;
    for v in vals.iter_mut() {
        if let Some(v) = v.take() {
            drop_caught(v, &mut first);
        }
    }
    rethrow(first);
}

impl Args {
    /// No arguments.
    #[inline]
    pub const fn new() -> Self {
        Args {
            vals: ManuallyDrop::new([None, None, None, None]),
        }
    }

    /// Number of arguments.
    pub fn len(&self) -> usize {
        self.vals.iter().take_while(|v| v.is_some()).count()
    }

    /// True when there are no arguments.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.vals[0].is_none()
    }

    /// Appends a value; fails with `InternalError` past four values.
    pub fn push(&mut self, v: Value) -> Result<(), Error> {
        match self.vals.iter_mut().find(|v| v.is_none()) {
            Some(slot) => {
                *slot = Some(v);
                Ok(())
            }
            None => Err(Error::internal("success args: at most 4 values")),
        }
    }

    /// The value at `i`, if present.
    pub fn get(&self, i: usize) -> Option<&Value> {
        self.vals.get(i).and_then(|v| v.as_ref())
    }

    /// Removes the value at `i` and returns it; the values after it move
    /// down one place, as with `Vec::remove` (`None` when there is no
    /// value at `i`).
    ///
    /// ```
    /// use futoin_asyncsteps::{Args, IntoArgs, Value};
    /// let mut a = (1i32, String::from("x")).into_args();
    /// assert!(matches!(a.take(0), Some(Value::I32(1))));
    /// assert_eq!(a.len(), 1);
    /// assert_eq!(a.type_names(), "(String,)");
    /// ```
    pub fn take(&mut self, i: usize) -> Option<Value> {
        let v = self.vals.get_mut(i)?.take()?;
        self.vals[i..].rotate_left(1);
        Some(v)
    }

    /// Args with `v` in the first slot (or none).
    #[inline]
    pub(crate) fn one(v: Option<Value>) -> Self {
        Args {
            vals: ManuallyDrop::new([v, None, None, None]),
        }
    }

    /// The first slot's value when no other slot holds one; otherwise the
    /// args as they are.
    #[inline]
    pub(crate) fn into_one(mut self) -> Result<Option<Value>, Self> {
        if self.vals[1..].iter().all(Option::is_none) {
            Ok(self.vals[0].take())
        } else {
            Err(self)
        }
    }

    /// The types held, formatted like a tuple type: `(i32, String)`.
    pub fn type_names(&self) -> String {
        let names: Vec<&str> = self.vals.iter().flatten().map(|v| v.type_name()).collect();
        tuple_names(&names)
    }
}

impl fmt::Debug for Args {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.vals.iter().flatten()).finish()
    }
}

fn tuple_names(names: &[&str]) -> String {
    match names.len() {
        1 => format!("({},)", names[0]),
        _ => format!("({})", names.join(", ")),
    }
}

/// Turns a tuple of up to four [`ArgValue`]s (or a single one) into [`Args`].
///
/// ```
/// use futoin_asyncsteps::IntoArgs;
/// assert_eq!(5i32.into_args().len(), 1);
/// assert_eq!(().into_args().len(), 0);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be given as step args",
    note = "step args are `()`, one `ArgValue`, or a tuple of up to four `ArgValue`s; a type of your own becomes an `ArgValue` with an empty impl (see its docs)"
)]
pub trait IntoArgs {
    /// Converts into [`Args`].
    fn into_args(self) -> Args;
}

/// Extracts typed values from [`Args`].
///
/// `()` accepts any arguments and ignores them; a tuple of `N` types requires
/// exactly `N` values of those types, and one bare type `T` one value, as
/// `(T,)` does. [`Args`] itself takes everything as is.
///
/// ```
/// use futoin_asyncsteps::{AsyncSteps, TestTool};
/// let mut tool = TestTool::new();
/// let mut root = AsyncSteps::new();
/// root.add(|s, ()| s.success(20u32));
/// root.add(|s, n: u32| s.success(n + 1));
/// root.add(|s, (n,): (u32,)| s.success(n * 2));
/// let p = root.promise::<u32>(&mut tool);
/// assert_eq!(tool.block_on(p).unwrap(), 42);
/// ```
#[diagnostic::on_unimplemented(
    message = "a step cannot take `{Self}` as its args",
    note = "a step takes `()`, `Args`, one `ArgValue` (`v: T`), or a tuple of up to four `ArgValue`s"
)]
pub trait FromArgs: Sized {
    /// Extracts the values; on a mismatch the error info names both sides.
    fn from_args(args: &mut Args) -> Result<Self, Error>;
    /// The expected types, formatted like a tuple type.
    fn expected() -> String;
}

impl IntoArgs for Args {
    fn into_args(self) -> Args {
        self
    }
}

impl FromArgs for Args {
    fn from_args(args: &mut Args) -> Result<Self, Error> {
        Ok(std::mem::take(args))
    }
    fn expected() -> String {
        "Args".into()
    }
}

impl IntoArgs for () {
    #[inline]
    fn into_args(self) -> Args {
        Args::new()
    }
}

impl FromArgs for () {
    #[inline]
    fn from_args(_args: &mut Args) -> Result<Self, Error> {
        Ok(())
    }
    fn expected() -> String {
        "()".into()
    }
}

impl<T: ArgValue> IntoArgs for T {
    #[inline]
    fn into_args(self) -> Args {
        let mut a = Args::new();
        a.vals[0] = Some(self.into_value());
        a
    }
}

/// One value, bare: a step `|s, n: u32|` takes what `success(7u32)` or
/// `success((7u32,))` gives, as `(n,): (u32,)` does.
impl<T: ArgValue> FromArgs for T {
    #[inline]
    fn from_args(args: &mut Args) -> Result<Self, Error> {
        <(T,)>::from_args(args).map(|(v,)| v)
    }
    fn expected() -> String {
        <(T,)>::expected()
    }
}

fn mismatch(expected: String, args: &Args) -> Error {
    Error::internal(mismatch_info(&expected, args))
}

fn mismatch_info(expected: &str, args: &Args) -> String {
    format!("step expects {expected}, got {}", args.type_names())
}

/// `e`, the error of `T::from_args(args)` on a promise's result, in the
/// words of a promise when it is the type mismatch (which says "step
/// expects", though no step expects a promise's result); any other error
/// (from a `FromArgs` of the user's) as it is. `args` is as `from_args`
/// left it: a mismatch gives every value back.
pub(crate) fn promise_mismatch<T: FromArgs>(e: Error, args: &Args) -> Error {
    let expected = T::expected();
    if e.code() == crate::error::codes::INTERNAL_ERROR
        && e.info() == Some(mismatch_info(&expected, args).as_str())
    {
        Error::internal(format!(
            "promise result: expected {expected}, got {}",
            args.type_names()
        ))
    } else {
        e
    }
}

macro_rules! tuple {
    ($n:literal; $($t:ident $i:tt $v:ident),*) => {
        impl<$($t: ArgValue),*> IntoArgs for ($($t,)*) {
            #[inline]
            fn into_args(self) -> Args {
                let mut a = Args::new();
                $( a.vals[$i] = Some(self.$i.into_value()); )*
                a
            }
        }

        impl<$($t: ArgValue),*> FromArgs for ($($t,)*) {
            #[inline]
            fn from_args(args: &mut Args) -> Result<Self, Error> {
                if args.len() != $n {
                    return Err(mismatch(Self::expected(), args));
                }
                // Convert every value (each conversion checks its type);
                // on any mismatch, put them all back for the message.
                $( let $v = match args.vals[$i].take() {
                    Some(v) => $t::from_value(v),
                    None => return Err(mismatch(Self::expected(), args)),
                }; )*
                match ($($v,)*) {
                    ($(Ok($v),)*) => Ok(($($v,)*)),
                    ($($v,)*) => {
                        $( args.vals[$i] = Some(match $v {
                            Ok(x) => x.into_value(),
                            Err(x) => x,
                        }); )*
                        Err(mismatch(Self::expected(), args))
                    }
                }
            }
            fn expected() -> String {
                tuple_names(&[$(<$t>::type_name()),*])
            }
        }
    };
}

tuple!(1; A 0 a);
tuple!(2; A 0 a, B 1 b);
tuple!(3; A 0 a, B 1 b, C 2 c);
tuple!(4; A 0 a, B 1 b, C 2 c, D 3 d);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mismatch_names_types() {
        let mut a = (1i64,).into_args();
        let e = <(i32, String)>::from_args(&mut a).unwrap_err();
        assert_eq!(e.info(), Some("step expects (i32, String), got (i64,)"));
    }

    #[test]
    fn a_panicking_value_does_not_keep_the_others_from_dropping() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        struct Loud(bool);
        impl Drop for Loud {
            fn drop(&mut self) {
                DROPS.fetch_add(1, Ordering::SeqCst);
                if self.0 {
                    panic!("loud");
                }
            }
        }
        impl ArgValue for Loud {}
        let a = (Loud(true), Loud(false), Loud(false)).into_args();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(a)));
        assert!(r.is_err());
        assert_eq!(DROPS.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn mismatch_after_a_converted_value_keeps_every_value() {
        let mut a = (1i32, 2u8).into_args();
        let e = <(i32, String)>::from_args(&mut a).unwrap_err();
        assert_eq!(e.info(), Some("step expects (i32, String), got (i32, u8)"));
        // The register is intact: the right types still convert.
        assert_eq!(<(i32, u8)>::from_args(&mut a).unwrap(), (1, 2));
    }

    #[test]
    fn promise_mismatch_rewords_only_the_type_mismatch() {
        let a = (1u8,).into_args();
        let e = promise_mismatch::<(String,)>(mismatch("(String,)".into(), &a), &a);
        assert_eq!(
            e.info(),
            Some("promise result: expected (String,), got (u8,)")
        );
        // Another error (a FromArgs of the user's) is left as it is.
        let e = promise_mismatch::<(String,)>(Error::with_info("Custom", "why"), &a);
        assert_eq!((e.code(), e.info()), ("Custom", Some("why")));
    }

    #[test]
    fn unit_ignores() {
        let mut a = (1i64, 2u8).into_args();
        <()>::from_args(&mut a).unwrap();
    }

    #[test]
    fn custom_roundtrip() {
        struct X(u8);
        impl ArgValue for X {}
        let mut a = (X(4), String::from("s")).into_args();
        let (x, s) = <(X, String)>::from_args(&mut a).unwrap();
        assert_eq!((x.0, s.as_str()), (4, "s"));
    }

    #[test]
    fn value_is_small() {
        assert_eq!(std::mem::size_of::<Value>(), 24);
    }

    #[test]
    fn push_limit() {
        let mut a = (1u8, 2u8, 3u8, 4u8).into_args();
        assert_eq!(a.len(), 4);
        assert!(a.push(Value::U8(5)).is_err());
    }
}
