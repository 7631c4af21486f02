//! Telling threads apart, and naming them.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Hands out the thread marks; 0 is never given (it means "no thread").
static NEXT_THREAD: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    static MARK: usize = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

/// A number unique to the calling thread for the life of the process
/// (unlike a thread-local's address, never reused by a later thread), and
/// never 0.
#[inline]
pub(crate) fn thread_mark() -> usize {
    MARK.with(|m| *m)
}

/// A thread name the OS can take: no NUL byte (`std::thread::Builder`
/// would panic on one).
pub(crate) fn check_thread_name(name: &str) -> std::io::Result<()> {
    if name.contains('\0') {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("thread name {name:?} holds a NUL byte"),
        ));
    }
    Ok(())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_the_same_on_one_thread_and_differs_on_another() {
        let here = thread_mark();
        assert_ne!(here, 0);
        assert_eq!(thread_mark(), here);
        let there = std::thread::spawn(thread_mark).join().unwrap();
        assert_ne!(there, here);
        assert_ne!(there, 0);
    }

    #[test]
    fn a_name_with_a_nul_byte_is_refused() {
        assert!(check_thread_name("loop-0").is_ok());
        let e = check_thread_name("lo\0op").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    }
}
