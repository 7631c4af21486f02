//! Helpers shared by the integration tests: an ordered log that closures
//! given to root steps (`Clone + Send`) can write to, and a drop logger.
#![allow(dead_code)]

use futoin_asyncsteps::ExternalHandle;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub type Log = Arc<Mutex<Vec<String>>>;

pub fn log() -> Log {
    Arc::new(Mutex::new(Vec::new()))
}

pub fn push(l: &Log, s: impl Into<String>) {
    l.lock().unwrap().push(s.into());
}

pub fn entries(l: &Log) -> Vec<String> {
    l.lock().unwrap().clone()
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

/// A `Clone + Send` log of what the callbacks did, in order (method style).
#[derive(Clone, Default)]
pub struct Recorder(Arc<Mutex<Vec<String>>>);

impl Recorder {
    pub fn push(&self, s: impl Into<String>) {
        self.0.lock().unwrap().push(s.into());
    }
    pub fn get(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
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
