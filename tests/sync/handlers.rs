//! A step that calls `ISync::sync` itself and has its own error handler:
//! when the step fails while waiting (its wait timed out, the queue was
//! full), the handler runs with no place in the queue, so it can retry and
//! the next waiter is not held up meanwhile; a lock the step got stays
//! with it until it ends (its `stack()` values end first, as always).

use crate::common::*;
use futoin_asyncsteps::sync::{ISync, Mutex, Section, Throttle};
use futoin_asyncsteps::{
    error::codes, Args, AsyncSteps, Error, Promise, Step, StepResult, TestTool,
};
use std::time::Duration;

/// Waits `d` inside a step (a timeout recovered by its handler).
fn sleep(s: &mut Step<'_>, d: Duration) {
    s.add_catch(
        move |s, ()| {
            s.set_timeout(d);
            Ok(())
        },
        |s, _| s.success(()),
    );
}

/// A flow holding `obj` for 50 ms, started now.
fn holder<S: ISync + Clone>(tool: &mut TestTool, obj: &S) {
    let mut x = AsyncSteps::new();
    x.sync(obj, |s, ()| {
        sleep(s, ms(50));
        Ok(())
    });
    x.execute(tool);
    tool.run_all_ready();
}

/// A flow whose step calls `obj.sync(..)` directly with a 10 ms timeout;
/// its handler logs the error and the Mutex counts, then runs `then`.
fn impatient(
    tool: &mut TestTool,
    m: &Mutex,
    r: &Log,
    then: fn(&mut Step<'_>, &Mutex),
) -> Promise<()> {
    let (m1, m2, r1) = (m.clone(), m.clone(), r.clone());
    let mut p = AsyncSteps::new();
    p.add_catch(
        move |s, a: Args| {
            s.set_timeout(ms(10));
            m1.sync(s, a, Section::new(|_: &mut Step<'_>, ()| Ok(())))
        },
        move |s, e| {
            r1.push(format!("handler: {} {:?}", e.code(), m2.counts()));
            then(s, &m2);
            Ok(())
        },
    );
    p.promise(tool)
}

/// A flow entering `m` after `impatient` queued, logging when (ms since
/// `t0`) it got in.
fn next_waiter(tool: &mut TestTool, m: &Mutex, r: &Log) -> Promise<()> {
    let (r1, t0) = (r.clone(), tool.now());
    let mut y = AsyncSteps::new();
    y.sync(m, move |s, ()| {
        r1.push(format!(
            "next in at {} ms",
            (s.tool().now() - t0).as_millis()
        ));
        Ok(())
    });
    y.promise(tool)
}

#[test]
fn a_queued_step_that_timed_out_leaves_the_queue_before_its_handler() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let r = Log::default();
    holder(&mut tool, &m);
    let p = impatient(&mut tool, &m, &r, |s, _| sleep(s, ms(100)));
    let y = next_waiter(&mut tool, &m, &r);
    tool.run_all_ready();
    assert_eq!(m.counts(), (1, 2));
    tool.advance(ms(10));
    assert_eq!(m.counts(), (1, 1), "the impatient flow left the queue");
    tool.run_all();
    tool.block_on(p).unwrap();
    tool.block_on(y).unwrap();
    // The next waiter got in when the holder left, not after the handler.
    assert_eq!(r.get(), ["handler: Timeout (1, 1)", "next in at 50 ms"]);
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn a_handler_retrying_after_its_queued_step_timed_out_gets_in() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let r = Log::default();
    holder(&mut tool, &m);
    let p = impatient(&mut tool, &m, &r, |s, m| {
        s.sync(m, |s, ()| s.success(()));
    });
    tool.run_all();
    tool.block_on(p).unwrap();
    assert_eq!(r.get(), ["handler: Timeout (1, 0)"]);
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn a_handler_retrying_after_a_full_queue_is_refused_for_the_queue_again() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, Some(0));
    let r = Log::default();
    holder(&mut tool, &m);
    let (m1, m2, r1) = (m.clone(), m.clone(), r.clone());
    let mut p = AsyncSteps::new();
    p.add_catch(
        move |s, a: Args| m1.sync(s, a, Section::new(|_: &mut Step<'_>, ()| Ok(()))),
        move |s, e| {
            r1.push(format!("handler: {} {:?}", e.code(), e.info()));
            // Not "this step already waits for the same object".
            m2.sync(s, Args::new(), Section::new(|_: &mut Step<'_>, ()| Ok(())))
        },
    );
    let p = p.promise::<()>(&mut tool);
    tool.run_all();
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(
        (e.code(), e.info()),
        (codes::DEFENSE_REJECTED, Some("Mutex: the queue is full"))
    );
    assert_eq!(
        r.get(),
        ["handler: DefenseRejected Some(\"Mutex: the queue is full\")"]
    );
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn a_step_whose_section_failed_keeps_the_lock_it_got_until_it_ends() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let r = Log::default();
    let (m1, m2, r1) = (m.clone(), m.clone(), r.clone());
    let mut p = AsyncSteps::new();
    p.add_catch(
        move |s, a: Args| {
            m1.sync(
                s,
                a,
                Section::new(|_: &mut Step<'_>, ()| {
                    Err(Error::with_info("Busy", "in the section"))
                }),
            )
        },
        move |s, e| {
            r1.push(format!("handler: {} {:?}", e.code(), m2.counts()));
            // Still this step's: a retry re-enters it.
            let (r2, m3) = (r1.clone(), m2.clone());
            s.sync(&m2, move |_, ()| {
                r2.push(format!("retry in {:?}", m3.counts()));
                Ok(())
            });
            Ok(())
        },
    );
    let p = p.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(r.get(), ["handler: Busy (1, 0)", "retry in (1, 0)"]);
    assert_eq!(m.counts(), (0, 0));
}

/// A value dropped with the step that holds the Mutex: logs the counts.
struct WriteBack(Log, Mutex);

impl Drop for WriteBack {
    fn drop(&mut self) {
        self.0.push(format!("write-back {:?}", self.1.counts()));
    }
}

/// A user's `ISync`: a Mutex, with a guard on the step's stack.
#[derive(Clone)]
struct Guarded(Mutex, Log);

impl ISync for Guarded {
    fn sync(&self, s: &mut Step<'_>, args: Args, section: Section) -> StepResult {
        self.0.sync(s, args, section)?;
        s.stack(WriteBack(self.1.clone(), self.0.clone()));
        Ok(())
    }
}

/// A step syncing on `Guarded` directly, its section timing out, with or
/// without a handler (which waits 10 ms), and a flow waiting for the Mutex.
fn guarded(handler: bool) -> Vec<String> {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let r = Log::default();
    let g = Guarded(m.clone(), r.clone());
    let body = move |s: &mut Step<'_>, a: Args| {
        let section = Section::new(|s: &mut Step<'_>, ()| {
            s.set_timeout(ms(5));
            Ok(())
        });
        g.sync(s, a, section)
    };
    let mut p = AsyncSteps::new();
    if handler {
        let (r1, m1) = (r.clone(), m.clone());
        p.add_catch(body, move |s, e| {
            r1.push(format!("handler {} {:?}", e.code(), m1.counts()));
            sleep(s, ms(10));
            Ok(())
        });
    } else {
        p.add(body);
    }
    let p = p.promise::<()>(&mut tool);
    tool.run_all_ready();
    let (r1, m1) = (r.clone(), m.clone());
    let mut w = AsyncSteps::new();
    w.sync(&m, move |_, ()| {
        r1.push(format!("waiter in {:?}", m1.counts()));
        Ok(())
    });
    let w = w.promise::<()>(&mut tool);
    tool.run_all();
    let _ = tool.block_on(p);
    tool.block_on(w).unwrap();
    assert_eq!(m.counts(), (0, 0));
    r.get()
}

#[test]
fn a_stack_value_of_the_locking_step_ends_before_its_lock_with_a_handler_too() {
    assert_eq!(guarded(false), ["write-back (1, 1)", "waiter in (1, 0)"]);
    assert_eq!(
        guarded(true),
        [
            "handler Timeout (1, 1)",
            "write-back (1, 1)",
            "waiter in (1, 0)"
        ]
    );
}

#[test]
fn a_throttle_waiter_that_timed_out_takes_no_entry_of_the_next_period() {
    let mut tool = TestTool::new();
    let t = Throttle::new(1, ms(100), None);
    let r = Log::default();
    let t0 = tool.now();
    // Takes the one entry of the first period.
    let mut x = AsyncSteps::new();
    x.sync(&t, |_, ()| Ok(()));
    let x = x.promise::<()>(&mut tool);
    tool.run_all_ready();
    let (t1, r1) = (t.clone(), r.clone());
    let mut p = AsyncSteps::new();
    p.add_catch(
        move |s, a: Args| {
            s.set_timeout(ms(10));
            t1.sync(s, a, Section::new(|_: &mut Step<'_>, ()| Ok(())))
        },
        move |s, e| {
            r1.push(format!("handler: {}", e.code()));
            sleep(s, ms(300));
            Ok(())
        },
    );
    let p = p.promise::<()>(&mut tool);
    let r2 = r.clone();
    let mut y = AsyncSteps::new();
    y.sync(&t, move |s, ()| {
        r2.push(format!(
            "next in at {} ms",
            (s.tool().now() - t0).as_millis()
        ));
        Ok(())
    });
    let y = y.promise::<()>(&mut tool);
    tool.run_all();
    for p in [x, p, y] {
        tool.block_on(p).unwrap();
    }
    assert_eq!(r.get(), ["handler: Timeout", "next in at 100 ms"]);
}
