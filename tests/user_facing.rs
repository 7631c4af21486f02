//! Behaviour a new user of the crate meets first: what the error
//! messages of sync objects' bad settings say, and `Mutex::default()`.
//!
//! Everything runs on a [`TestTool`] (virtual time, nothing sleeps).

use futoin_asyncsteps::{AsyncSteps, TestTool};

mod common;
use common::{assert_internal, run};

// ---------------------------------------------------------------------------
// Sync objects
// ---------------------------------------------------------------------------

#[test]
fn zero_limiter_options_are_named_as_limiter_options() {
    use futoin_asyncsteps::sync::{Limiter, LimiterOptions};
    use std::time::Duration;
    let cases = [
        (
            LimiterOptions {
                concurrent: 0,
                ..Default::default()
            },
            "Limiter: concurrent is 0, so no flow can ever enter",
        ),
        (
            LimiterOptions {
                rate: 0,
                ..Default::default()
            },
            "Limiter: rate is 0, so no flow can ever enter",
        ),
        (
            LimiterOptions {
                period: Duration::ZERO,
                ..Default::default()
            },
            "Limiter: the period is zero, so it would limit nothing",
        ),
    ];
    for (o, info) in cases {
        let l = Limiter::new(o);
        // A level-0 sync step, and a sync added inside a step.
        let mut root = AsyncSteps::new();
        root.sync(&l, |_, ()| Ok(()));
        assert_internal(&run::<()>(root).unwrap_err(), info);
        let mut root = AsyncSteps::new();
        root.add(move |s, ()| {
            s.sync(&l, |_, ()| Ok(()));
            Ok(())
        });
        assert_internal(&run::<()>(root).unwrap_err(), info);
    }
}

// ---------------------------------------------------------------------------
// Debug, Default and loop collections
// ---------------------------------------------------------------------------

#[test]
fn a_default_mutex_lets_one_in_and_queues_the_rest() {
    use futoin_asyncsteps::sync::Mutex;
    use std::time::Duration;
    let mut tool = TestTool::new();
    let m = Mutex::default();
    let ps: Vec<_> = (0..50)
        .map(|_| {
            let mut root = AsyncSteps::new();
            root.sync(&m, |s, ()| {
                s.add_catch(
                    |s, ()| {
                        s.set_timeout(Duration::from_millis(10));
                        Ok(())
                    },
                    |s, _| s.success(()),
                );
                Ok(())
            });
            root.promise::<()>(&mut tool)
        })
        .collect();
    tool.run_all_ready();
    assert_eq!(m.counts(), (1, 49)); // max 1, no queue limit
    for p in ps {
        tool.block_on(p).unwrap();
    }
    assert_eq!(tool.elapsed(), Duration::from_millis(500));
}
