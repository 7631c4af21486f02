//! `cabi::wrap`: Rust steps in a flow owned through the binary interface,
//! tested by wrapping this crate's own C interface (every call goes
//! through the `FutoInAsyncSteps` function table).

use futoin_asyncsteps::cabi::types::*;
use futoin_asyncsteps::cabi::{
    futoin_asyncsteps_new, futoin_mutex_new, futoin_runtime_free, futoin_runtime_new,
    futoin_sync_free, wrap_step, ForeignRoot, ForeignSteps, FutoInRuntime,
};
use futoin_asyncsteps::{error::codes, Error};
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A trace shared by the closures of one test.
#[derive(Clone, Default)]
struct Trace(Arc<Mutex<Vec<String>>>);

impl Trace {
    fn push(&self, s: impl Into<String>) {
        self.0.lock().unwrap().push(s.into());
    }
    fn take(&self) -> String {
        std::mem::take(&mut *self.0.lock().unwrap()).join(" ")
    }
}

/// Counts drops of the value it is moved into.
struct DropCount(Arc<AtomicUsize>);

impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A one-loop runtime, freed at the end of the test.
struct Rt(*mut FutoInRuntime);

impl Rt {
    fn new() -> Self {
        let rt = futoin_runtime_new(1);
        assert!(!rt.is_null());
        Rt(rt)
    }
    fn root(&self) -> ForeignRoot {
        // SAFETY: a fresh root of a live runtime, owned by the result.
        unsafe { ForeignRoot::from_raw(futoin_asyncsteps_new(self.0)) }.expect("a root")
    }
}

impl Drop for Rt {
    fn drop(&mut self) {
        // SAFETY: the runtime this test made; the roots' handles are gone.
        unsafe { futoin_runtime_free(self.0) };
    }
}

/// Executes `root` after adding a last step that reports "ok"; returns
/// "ok" or the unhandled error's code.
fn run(mut root: ForeignRoot) -> String {
    let (tx, rx): (Sender<String>, Receiver<String>) = channel();
    let tx2 = tx.clone();
    root.add(move |_, ()| {
        tx.send("ok".into()).unwrap();
        Ok(())
    });
    let flow = root.execute(move |e| tx2.send(e.code().to_owned()).unwrap());
    let r = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the flow ends");
    drop(flow);
    r
}

#[test]
fn steps_sub_steps_and_args_in_order() {
    let rt = Rt::new();
    let t = Trace::default();
    let mut root = rt.root();
    let t1 = t.clone();
    root.add(move |s, ()| {
        t1.push("a");
        let t2 = t1.clone();
        s.add(move |s, ()| {
            t2.push("a1");
            s.success((2i32, "x".to_string()))
        });
        let t3 = t1.clone();
        s.add(move |s, (n, x): (i32, String)| {
            t3.push(format!("a2({n},{x})"));
            s.success((n * 21,))
        });
        t1.push("a-end");
        Ok(())
    });
    let t4 = t.clone();
    root.add(move |s, (v,): (i32,)| {
        t4.push(format!("b({v})"));
        s.success_step(("y".to_string(),));
        Ok(())
    });
    let t5 = t.clone();
    root.add(move |_, (y,): (String,)| {
        t5.push(format!("c({y})"));
        Ok(())
    });
    assert_eq!(run(root), "ok");
    assert_eq!(t.take(), "a a-end a1 a2(2,x) b(42) c(y)");
}

#[test]
fn errors_reach_handlers_with_info_and_recover() {
    let rt = Rt::new();
    let t = Trace::default();
    let mut root = rt.root();
    let (t1, t2, t3, t4) = (t.clone(), t.clone(), t.clone(), t.clone());
    root.add(move |s, ()| {
        // Silent handler: the error goes on to the outer one.
        let t1b = t1.clone();
        s.add_catch(
            move |s, ()| {
                s.add_catch(
                    |s, ()| s.error("NotFound", "no such user"),
                    move |_, e| {
                        t1b.push(format!("inner({},{})", e.code(), e.info().unwrap_or("-")));
                        Ok(())
                    },
                );
                Ok(())
            },
            move |s, e| {
                t2.push(format!("outer({})", e.code()));
                // Steps added in a handler run instead.
                let t2b = t2.clone();
                s.add(move |s, ()| {
                    t2b.push("in-handler");
                    s.success(("fallback".to_string(),))
                });
                Ok(())
            },
        );
        Ok(())
    });
    root.add(move |s, (v,): (String,)| {
        t3.push(format!("next({v})"));
        s.add_catch(
            |_, ()| panic!("boom"),
            move |s, e| {
                t4.push(format!("{}:{}", e.code(), e.info().unwrap_or("-")));
                s.success(())
            },
        );
        Ok(())
    });
    assert_eq!(run(root), "ok");
    assert_eq!(
        t.take(),
        "inner(NotFound,no such user) outer(NotFound) in-handler next(fallback) \
         InternalError:panic in a wrapped step: boom"
    );
}

#[test]
fn unhandled_errors_and_wrong_args_reach_on_unhandled() {
    let rt = Rt::new();
    let mut root = rt.root();
    root.add(|s, ()| s.error("Boom", "first"));
    assert_eq!(run(root), "Boom");

    let mut root = rt.root();
    root.add(|s, ()| s.success((1i32,)));
    // The next step takes a String: a clear InternalError.
    let seen = Arc::new(Mutex::new(String::new()));
    let seen2 = seen.clone();
    root.add_catch(
        |_, (_s,): (String,)| Ok(()),
        move |_, e| {
            *seen2.lock().unwrap() = e.info().unwrap_or("-").to_string();
            Ok(())
        },
    );
    assert_eq!(run(root), codes::INTERNAL_ERROR);
    let info = seen.lock().unwrap().clone();
    assert_eq!(info, "step expects (String,), got (i32,)");
}

#[test]
fn loops_with_labels_break_and_continue() {
    let rt = Rt::new();
    let t = Trace::default();
    let mut root = rt.root();
    let t1 = t.clone();
    root.add(move |s, ()| {
        let tl = t1.clone();
        s.loop_labeled("outer", move |s| {
            let n = s.state_variable("n", || 0u32).expect("a state variable");
            *n += 1;
            let n = *n;
            let ti = tl.clone();
            s.repeat(5, move |s, i| {
                if i == 1 {
                    return s.continue_loop();
                }
                if n == 2 && i == 2 {
                    return s.break_label("outer");
                }
                ti.push(format!("{n}.{i}"));
                if i == 3 {
                    return s.break_loop();
                }
                Ok(())
            });
            Ok(())
        });
        let tf = t1.clone();
        s.for_each(vec!["p", "q"], move |_, i, v| {
            tf.push(format!("{i}={v}"));
            Ok(())
        });
        let tu = t1.clone();
        s.add_catch(
            |s, ()| {
                s.repeat(3, |s, _| s.break_label("nowhere"));
                Ok(())
            },
            move |s, e| {
                tu.push(e.code().to_owned());
                s.success(())
            },
        );
        Ok(())
    });
    assert_eq!(run(root), "ok");
    assert_eq!(t.take(), "1.0 1.2 1.3 2.0 0=p 1=q LoopBreak");
}

#[test]
fn parallel_branches_and_error_cancel() {
    let rt = Rt::new();
    let t = Trace::default();
    let cancelled = Arc::new(AtomicUsize::new(0));
    let mut root = rt.root();
    let (t1, c1) = (t.clone(), cancelled.clone());
    root.add(move |s, ()| {
        let (ta, tb) = (t1.clone(), t1.clone());
        s.parallel()
            .add(move |s, ()| {
                ta.push("b1");
                *s.state_variable("sum", || 0i32).unwrap() += 1;
                Ok(())
            })
            .add(move |s, ()| {
                tb.push("b2");
                *s.state_variable("sum", || 0i32).unwrap() += 10;
                Ok(())
            });
        let tc = t1.clone();
        s.add(move |s, ()| {
            let sum = *s.state_variable("sum", || 0i32).unwrap();
            tc.push(format!("sum={sum}"));
            Ok(())
        });
        let (te, c2) = (t1.clone(), c1.clone());
        s.parallel_catch(move |s, e| {
            te.push(format!("par-error({})", e.code()));
            s.success(())
        })
        .add(move |s, ()| {
            let c3 = c2.clone();
            s.set_cancel(move || {
                c3.fetch_add(1, Ordering::SeqCst);
            });
            Ok(())
        })
        .add(|s, ()| s.error("Failed", "branch 2"));
        Ok(())
    });
    assert_eq!(run(root), "ok");
    assert_eq!(t.take(), "b1 b2 sum=11 par-error(Failed)");
    assert_eq!(cancelled.load(Ordering::SeqCst), 1);
}

#[test]
fn wait_external_from_another_thread_and_timeout() {
    let rt = Rt::new();
    let t = Trace::default();
    let mut root = rt.root();
    let (t1, t2, t3) = (t.clone(), t.clone(), t.clone());
    let (htx, hrx) = channel();
    root.add(move |s, ()| {
        let h = s.wait_external();
        assert!(h.is_valid());
        std::thread::spawn(move || {
            h.success((5i32,)).unwrap();
            htx.send(h).unwrap();
        });
        Ok(())
    });
    root.add(move |s, (v,): (i32,)| {
        t1.push(format!("got({v})"));
        let t4 = t1.clone();
        s.add_catch(
            move |s, ()| {
                s.set_cancel(move || t4.push("cancel-cb"));
                s.set_timeout(Duration::from_millis(5));
                Ok(())
            },
            move |s, e| {
                t2.push(format!("handler({})", e.code()));
                s.success(())
            },
        );
        Ok(())
    });
    root.add(move |_, ()| {
        t3.push("after");
        Ok(())
    });
    assert_eq!(run(root), "ok");
    assert_eq!(t.take(), "got(5) cancel-cb handler(Timeout) after");
    // The handle of the ended step no longer completes anything.
    let h = hrx.recv().unwrap();
    assert!(!h.is_valid());
    let e = h.success((6i32,)).unwrap_err();
    assert_eq!(e.code(), codes::INTERNAL_ERROR);
}

#[test]
fn stack_values_live_until_the_step_ends() {
    let rt = Rt::new();
    let drops = Arc::new(AtomicUsize::new(0));
    let t = Trace::default();
    let mut root = rt.root();
    let (d1, t1) = (drops.clone(), t.clone());
    root.add(move |s, ()| {
        let (d2, d3) = (d1.clone(), d1.clone());
        let p = s.stack(DropCount(d1.clone())).expect("stack memory");
        // SAFETY: the value lives until this step ends (after the sub-step).
        let _ = unsafe { p.as_ref() };
        let t2 = t1.clone();
        s.add(move |_, ()| {
            t2.push(format!("sub:{}", d2.load(Ordering::SeqCst)));
            Ok(())
        });
        let t3 = t1.clone();
        s.add(move |_, ()| {
            t3.push(format!("sub2:{}", d3.load(Ordering::SeqCst)));
            Ok(())
        });
        Ok(())
    });
    let (d4, t4) = (drops.clone(), t.clone());
    root.add(move |_, ()| {
        t4.push(format!("next:{}", d4.load(Ordering::SeqCst)));
        Ok(())
    });
    assert_eq!(run(root), "ok");
    assert_eq!(t.take(), "sub:0 sub2:0 next:1");
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn state_variables_made_once_typed_and_dropped_at_the_end() {
    let rt = Rt::new();
    let made = Arc::new(AtomicUsize::new(0));
    let drops = Arc::new(AtomicUsize::new(0));
    let t = Trace::default();
    let mut root = rt.root();
    let (m0, d0) = (made.clone(), drops.clone());
    // Made on the root before it runs.
    root.state_variable("v", move || {
        m0.fetch_add(1, Ordering::SeqCst);
        (7u64, DropCount(d0))
    })
    .expect("a root state variable");
    for k in 0..3 {
        let (m, d, t) = (made.clone(), drops.clone(), t.clone());
        root.add(move |s, ()| {
            let v = s
                .state_variable("v", move || {
                    m.fetch_add(1, Ordering::SeqCst);
                    (0u64, DropCount(d))
                })
                .expect("the same variable");
            v.0 += k;
            t.push(format!("{}", v.0));
            // Another type under the same name: None, not a bad cast.
            assert!(s.state_variable("v", || 1u8).is_none());
            Ok(())
        });
    }
    assert_eq!(run(root), "ok");
    assert_eq!(t.take(), "7 8 10");
    assert_eq!(made.load(Ordering::SeqCst), 1);
    drop(rt); // joins the loop: the flow's state is gone
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn scheduled_tasks_run_or_are_cancelled_and_dropped_once() {
    let rt = Rt::new();
    let t = Trace::default();
    let drops = Arc::new(AtomicUsize::new(0));
    let mut root = rt.root();
    let (t1, d1) = (t.clone(), drops.clone());
    root.add(move |s, ()| {
        let h = s.wait_external();
        let t2 = t1.clone();
        let mut soon = s.immediate(move || {
            t2.push("immediate");
            h.success(()).unwrap();
        });
        assert!(s.task_is_valid(&mut soon));
        let (t3, d) = (t1.clone(), DropCount(d1.clone()));
        let mut late = s.deferred(Duration::from_secs(3600), move || {
            let _d = d;
            t3.push("never");
        });
        assert!(s.task_is_valid(&mut late));
        s.cancel_task(&mut late);
        assert!(!s.task_is_valid(&mut late));
        // Cancelling twice is harmless.
        s.cancel_task(&mut late);
        t1.push(format!("same-thread={}", s.is_same_thread()));
        Ok(())
    });
    assert_eq!(run(root), "ok");
    assert_eq!(t.take(), "same-thread=true immediate");
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn root_ids_and_new_instance() {
    let rt = Rt::new();
    let ids = Arc::new(Mutex::new(Vec::new()));
    let mut root = rt.root();
    let (i1, i2) = (ids.clone(), ids.clone());
    root.add(move |s, ()| {
        i1.lock().unwrap().push(s.root_id());
        assert!(s.is_valid());
        // A new root of the same implementation runs on its own.
        let mut other = s.new_instance().expect("a new root");
        let (i3, h) = (i1.clone(), s.wait_external());
        other.add(move |s, ()| {
            i3.lock().unwrap().push(s.root_id());
            h.success(()).unwrap();
            Ok(())
        });
        // The flow's handle is kept in a state variable until the end.
        let flow = other.execute(|e| panic!("unexpected {e}"));
        s.state_variable("other", move || flow);
        Ok(())
    });
    root.add(move |s, ()| {
        i2.lock().unwrap().push(s.root_id());
        Ok(())
    });
    assert_eq!(run(root), "ok");
    let ids = ids.lock().unwrap().clone();
    assert_eq!(ids.len(), 3);
    assert_eq!(ids[0], ids[2]);
    assert_ne!(ids[0], ids[1]);
}

#[test]
fn sync_with_a_mutex_serialises_flows() {
    let rt = Rt::new();
    let mx = futoin_mutex_new(1, u32::MAX);
    let (inside, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut flows = Vec::new();
    let (tx, rx) = channel();
    for _ in 0..4 {
        let mut root = rt.root();
        let (i, p, tx) = (inside.clone(), peak.clone(), tx.clone());
        let mxp = mx as usize;
        root.add(move |s, ()| {
            let (i2, p2) = (i.clone(), p.clone());
            // SAFETY: the mutex lives until the flows ended (freed below).
            unsafe {
                s.sync(mxp as *mut FutoInSync, move |s, ()| {
                    let now = i2.fetch_add(1, Ordering::SeqCst) + 1;
                    p2.fetch_max(now, Ordering::SeqCst);
                    // Hold it across a loop turn.
                    let h = s.wait_external();
                    let i3 = i2.clone();
                    s.immediate(move || {
                        i3.fetch_sub(1, Ordering::SeqCst);
                        h.success(()).unwrap();
                    });
                    Ok(())
                })
            };
            Ok(())
        });
        root.add(move |_, ()| {
            tx.send(()).unwrap();
            Ok(())
        });
        flows.push(root.execute(|e| panic!("unexpected {e}")));
    }
    for _ in 0..4 {
        rx.recv_timeout(Duration::from_secs(30)).unwrap();
    }
    assert_eq!(peak.load(Ordering::SeqCst), 1);
    drop(flows);
    // SAFETY: made above; no flow uses it any more.
    unsafe { futoin_sync_free(mx) };
}

/// A C-shaped step written with `wrap_step`.
unsafe extern "C" fn c_double(bsi: *mut FutoInAsyncSteps, _: *mut c_void, args: *const FutoInArgs) {
    // SAFETY: called by the implementation with its live handle and args.
    unsafe {
        wrap_step(bsi, args, |s: &mut ForeignSteps<'_>, (v,): (i32,)| {
            s.success((v * 2,))
        })
    }
}

#[test]
fn wrap_step_in_a_c_callback_and_closures_dropped_once() {
    let rt = Rt::new();
    let drops = Arc::new(AtomicUsize::new(0));
    let mut root = rt.root();
    root.success_step((21i32,));
    // A raw C callback added through the table, between Rust steps.
    // SAFETY: the root's own table; `c_double` is a C execute callback.
    unsafe {
        let p = root.as_ptr();
        ((*(*p).api).add.unwrap())(p, std::ptr::null_mut(), Some(c_double), None);
    }
    let seen = Arc::new(AtomicUsize::new(0));
    let s2 = seen.clone();
    root.add(move |_, (v,): (i32,)| {
        s2.store(v as usize, Ordering::SeqCst);
        Ok(())
    });
    // Steps that never run (the flow fails first) still drop their closures.
    root.add(|s, ()| s.error("Stop", "here"));
    let d = DropCount(drops.clone());
    root.add(move |_, ()| {
        let _d = &d;
        Ok(())
    });
    assert_eq!(run(root), "Stop");
    assert_eq!(seen.load(Ordering::SeqCst), 42);

    // A root never executed drops its closures when freed.
    let mut root = rt.root();
    let d = DropCount(drops.clone());
    root.add(move |_, ()| {
        let _d = &d;
        Ok(())
    });
    drop(root);
    drop(rt);
    assert_eq!(drops.load(Ordering::SeqCst), 2);
}

#[test]
fn bad_input_is_a_clear_error() {
    // SAFETY: NULL is checked.
    let e = unsafe { ForeignRoot::from_raw(std::ptr::null_mut()) }.unwrap_err();
    assert_eq!(e.code(), codes::INTERNAL_ERROR);
    assert_eq!(e.info(), Some("wrap: the root handle is NULL"));
    // A NULL step handle is ignored, and its args are still cleaned up.
    // SAFETY: NULL bsi and NULL args are accepted.
    unsafe {
        wrap_step(std::ptr::null_mut(), std::ptr::null(), |_, ()| {
            Err(Error::new("never"))
        })
    };
}

#[test]
fn root_level_parallel_success_step_and_sync() {
    let rt = Rt::new();
    let mx = futoin_mutex_new(1, u32::MAX);
    let t = Trace::default();
    let mut root = rt.root();
    let (t1, t2, t3) = (t.clone(), t.clone(), t.clone());
    root.parallel_catch(move |s, e| {
        t3.push(format!("par-error({})", e.code()));
        s.success(())
    })
    .add(move |s, ()| {
        t1.push("b1");
        *s.state_variable("n", || 0u32).unwrap() += 1;
        Ok(())
    })
    .add(move |s, ()| {
        t2.push("b2");
        *s.state_variable("n", || 0u32).unwrap() += 2;
        Ok(())
    });
    root.success_step((5u8,));
    let t4 = t.clone();
    // SAFETY: the mutex lives until after the flow ended (freed below).
    unsafe {
        root.sync(mx, move |s, (v,): (u8,)| {
            let n = *s.state_variable("n", || 0u32).unwrap();
            t4.push(format!("locked({v},{n})"));
            Ok(())
        })
    };
    assert_eq!(run(root), "ok");
    assert_eq!(t.take(), "b1 b2 locked(5,3)");
    drop(rt);
    // SAFETY: made above; the runtime (and every flow) is gone.
    unsafe { futoin_sync_free(mx) };
}
