use futoin_asyncsteps::{codes, AsyncSteps, TestTool};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Log = Arc<Mutex<Vec<String>>>;

fn log() -> Log {
    Arc::new(Mutex::new(Vec::new()))
}

fn push(l: &Log, s: impl Into<String>) {
    l.lock().unwrap().push(s.into());
}

#[test]
fn spec_1_1_levels() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let l0 = l.clone();
    root.add(move |s, ()| {
        push(&l0, "Level 0 add #1");
        let l1 = l0.clone();
        s.add(move |s, ()| {
            push(&l1, "Level 1 add #1");
            let (a, b, c) = (l1.clone(), l1.clone(), l1.clone());
            s.add(move |_, ()| {
                push(&a, "Level 2 add #1");
                Ok(())
            });
            s.parallel().add(move |_, ()| {
                push(&b, "Level 2 parallel #2");
                Ok(())
            });
            s.add(move |_, ()| {
                push(&c, "Level 2 add #3");
                Ok(())
            });
            Ok(())
        });
        let (b, c) = (l0.clone(), l0.clone());
        s.parallel().add(move |_, ()| {
            push(&b, "Level 1 parallel #2");
            Ok(())
        });
        s.add(move |_, ()| {
            push(&c, "Level 1 add #3");
            Ok(())
        });
        Ok(())
    });
    let (b, c) = (l.clone(), l.clone());
    root.parallel().add(move |_, ()| {
        push(&b, "Level 0 parallel #2");
        Ok(())
    });
    root.add(move |_, ()| {
        push(&c, "Level 0 add #3");
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(
        *l.lock().unwrap(),
        [
            "Level 0 add #1",
            "Level 1 add #1",
            "Level 2 add #1",
            "Level 2 parallel #2",
            "Level 2 add #3",
            "Level 1 parallel #2",
            "Level 1 add #3",
            "Level 0 parallel #2",
            "Level 0 add #3"
        ]
    );
}

#[test]
fn spec_1_2_and_1_2_1() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let (a, b) = (l.clone(), l.clone());
    root.add_catch(
        move |s, ()| {
            push(&a, "Level 0 func");
            let (c, d) = (a.clone(), a.clone());
            s.add_catch(
                move |s, ()| {
                    push(&c, "Level 1 func");
                    s.error("myerror", "x")
                },
                move |s, e| {
                    push(&d, format!("Level 1 onerror: {}", e.code()));
                    s.error("newerror", "y")
                },
            );
            Ok(())
        },
        move |s, e| {
            push(&b, format!("Level 0 onerror: {}", e.code()));
            s.success(("Prm".to_string(),))
        },
    );
    let c = l.clone();
    root.add(move |_, (p,): (String,)| {
        push(&c, format!("Level 0 func2: {p}"));
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(
        *l.lock().unwrap(),
        [
            "Level 0 func",
            "Level 1 func",
            "Level 1 onerror: myerror",
            "Level 0 onerror: newerror",
            "Level 0 func2: Prm"
        ]
    );

    // 1.2.1
    let l = log();
    let mut root = AsyncSteps::new();
    let (a, b) = (l.clone(), l.clone());
    root.add_catch(
        move |s, ()| {
            push(&a, "Level 0 func");
            let (c, d) = (a.clone(), a.clone());
            s.add_catch(
                move |s, ()| {
                    push(&c, "Level 1 func");
                    s.error("first", "")
                },
                move |s, e| {
                    push(&d, format!("Level 1 onerror: {}", e.code()));
                    let (f, g) = (d.clone(), d.clone());
                    s.add_catch(
                        move |s, ()| {
                            push(&f, "Level 2 func");
                            s.error("second", "")
                        },
                        move |_, e| {
                            push(&g, format!("Level 2 onerror: {}", e.code()));
                            Ok(())
                        },
                    );
                    Ok(())
                },
            );
            Ok(())
        },
        move |_, e| {
            push(&b, format!("Level 0 onerror: {}", e.code()));
            Ok(())
        },
    );
    let p = root.promise::<()>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap_err().code(), "second");
    assert_eq!(
        *l.lock().unwrap(),
        [
            "Level 0 func",
            "Level 1 func",
            "Level 1 onerror: first",
            "Level 2 func",
            "Level 2 onerror: second",
            "Level 0 onerror: second"
        ]
    );
}

#[test]
fn timeout_cancel_order() {
    let l = Rc::new(RefCell::new(Vec::<String>::new()));
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let lc = Arc::new(Mutex::new(Vec::<String>::new()));
    let (a, b) = (lc.clone(), lc.clone());
    root.add_catch(
        move |s, ()| {
            s.set_timeout(Duration::from_millis(100));
            let a1 = a.clone();
            s.set_cancel(move || push(&a1, "outer cancel"));
            let a2 = a.clone();
            s.add(move |s, ()| {
                let a3 = a2.clone();
                s.set_cancel(move || push(&a3, "inner cancel"));
                Ok(())
            });
            Ok(())
        },
        move |_, e| {
            push(&b, format!("handler {}", e.code()));
            Ok(())
        },
    );
    let mut p = root.promise::<()>(&mut tool);
    tool.advance(Duration::from_millis(99));
    assert!(p.try_take().is_none());
    tool.advance(Duration::from_millis(1));
    assert_eq!(p.try_take().unwrap().unwrap_err().code(), codes::TIMEOUT);
    assert_eq!(
        *lc.lock().unwrap(),
        ["inner cancel", "outer cancel", "handler Timeout"]
    );
    drop(l);
}

#[test]
fn repeat_and_break() {
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.state().set("n", 0u64);
        s.repeat(10_000, |s, i| {
            *s.state().get_mut::<u64>("n").unwrap() += i as u64;
            if i == 99 {
                return s.break_loop();
            }
            Ok(())
        });
        s.add(|s, ()| {
            let n = *s.state().get::<u64>("n").unwrap();
            s.success((n,))
        });
        Ok(())
    });
    let p = root.promise::<(u64,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap().0, 4950);
}
