//! Helpers shared by the integration tests: an ordered log that closures
//! given to root steps (`Clone + Send`) can write to, and a drop logger.
#![allow(dead_code)]

use futoin_asyncsteps::{error::codes, AsyncSteps, Error, ExternalHandle, FromArgs, TestTool};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A `Clone + Send` log of what the callbacks did, in order: written
/// with [`Log::push`] (or [`push`]), read with [`Log::get`] (or
/// [`entries`]).
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    pub fn push(&self, s: impl Into<String>) {
        self.0.lock().unwrap().push(s.into());
    }
    pub fn get(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

pub fn log() -> Log {
    Log::default()
}

pub fn push(l: &Log, s: impl Into<String>) {
    l.push(s);
}

pub fn entries(l: &Log) -> Vec<String> {
    l.get()
}

/// Logs `drop <name>` when dropped.
pub struct Guard(pub Log, pub &'static str);

impl Drop for Guard {
    fn drop(&mut self) {
        push(&self.0, format!("drop {}", self.1));
    }
}

pub type Slot<T> = Arc<Mutex<Option<T>>>;

pub fn slot<T>() -> Slot<T> {
    Arc::new(Mutex::new(None))
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A slot the test reads an [`ExternalHandle`] from after a step stored it.
#[derive(Clone, Default)]
pub struct HandleSlot(Arc<Mutex<Option<ExternalHandle>>>);

impl HandleSlot {
    pub fn put(&self, h: ExternalHandle) {
        *self.0.lock().unwrap() = Some(h);
    }
    pub fn get(&self) -> Option<ExternalHandle> {
        self.0.lock().unwrap().clone()
    }
    pub fn take(&self) -> ExternalHandle {
        self.0.lock().unwrap().take().expect("a stored handle")
    }
}

/// Runs `root` to its end on a fresh `TestTool`; its result.
pub fn run<T: FromArgs>(root: AsyncSteps) -> Result<T, Error> {
    let mut tool = TestTool::new();
    let p = root.promise::<T>(&mut tool);
    tool.block_on(p)
}

/// `e` is an `InternalError` with exactly this info.
#[track_caller]
pub fn assert_internal(e: &Error, info: &str) {
    assert_eq!(e.code(), codes::INTERNAL_ERROR, "error: {e}");
    assert_eq!(e.info(), Some(info), "error: {e}");
}

/// Keeps the default panic hook from printing the panics a test binary
/// raises on purpose: those whose message starts with `prefix` (one prefix
/// per binary: the hook is set once). Every other panic, a failed
/// assertion included, is printed as usual.
pub fn hide_panics(prefix: &'static str) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let p = info.payload();
            let msg = p
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| p.downcast_ref::<String>().map(String::as_str));
            if !msg.is_some_and(|m| m.starts_with(prefix)) {
                default(info);
            }
        }));
    });
}
