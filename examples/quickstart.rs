//! Quick start: three "requests" served concurrently by one `AsyncTool` loop.
//!
//! - `GET /user/42`  sequential sub-steps, a parallel step whose branches
//!   pass results through `state()`, and a `for_each` loop;
//! - `GET /user/404` an error raised two levels down and recovered by a
//!   handler, which continues the flow with a fallback value;
//! - `GET /slow`     a backend that answers too late: `set_timeout` fires,
//!   the cancel callback runs, the handler recovers, and the late answer is
//!   refused because its step has already ended.
//!
//! Run it with `cargo run --example quickstart`.

use futoin_asyncsteps::{error::codes, ArgValue, AsyncSteps, AsyncTool, Step};
use std::fmt::Display;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

static START: OnceLock<Instant> = OnceLock::new();

/// Prints one trace line: time since start, a tag, the message.
fn line(tag: &str, msg: impl Display) {
    let ms = START.get_or_init(Instant::now).elapsed().as_secs_f64() * 1e3;
    println!("[{ms:6.1} ms] {tag:<14} {msg}");
}

/// Traces a step, tagged with its request (kept in the flow's state).
fn trace(s: &mut Step<'_>, msg: impl Display) {
    let tag = s.state().get::<&'static str>("req").copied().unwrap_or("?");
    line(tag, msg);
}

/// Simulates a call to a slow backend: the current step waits, and `reply`
/// arrives after `ms` milliseconds as the step's result.
fn call_backend<T: ArgValue>(s: &mut Step<'_>, ms: u64, reply: T) {
    let done = s.wait_external();
    s.tool().deferred(Duration::from_millis(ms), move |_| {
        if let Err(e) = done.success((reply,)) {
            // The step already ended (timed out or was cancelled).
            line("backend", format!("late reply refused: {e}"));
        }
    });
}

/// A custom result type travels between steps after an empty `ArgValue` impl.
#[derive(Clone, Debug)]
struct Orders(Vec<u32>);
impl ArgValue for Orders {}

/// `GET /user/42`: auth, then profile and orders in parallel, then a loop.
fn user_request() -> AsyncSteps {
    let mut root = AsyncSteps::new();
    root.state().set("req", "GET /user/42");
    root.add(|s, ()| {
        trace(s, "auth: checking token");
        call_backend(s, 3, 42u32);
        Ok(())
    });
    root.add(|s, (uid,): (u32,)| {
        trace(s, format!("auth: ok, user id {uid}"));
        // Both branches start together; the step after the parallel one runs
        // when both have finished. Branches hand results over through state.
        s.parallel()
            .add(move |s, ()| {
                trace(s, "  profile: loading");
                s.add(|s, ()| {
                    call_backend(s, 8, String::from("Alice"));
                    Ok(())
                });
                s.add(|s, (name,): (String,)| {
                    trace(s, format!("  profile: got {name:?}"));
                    s.state().set("name", name);
                    Ok(())
                });
                Ok(())
            })
            .add(|s, ()| {
                trace(s, "  orders: loading");
                s.add(|s, ()| {
                    call_backend(s, 5, Orders(vec![120, 0, 75]));
                    Ok(())
                });
                s.add(|s, (orders,): (Orders,)| {
                    trace(s, format!("  orders: got {} orders", orders.0.len()));
                    s.state().set("orders", orders);
                    Ok(())
                });
                Ok(())
            });
        Ok(())
    });
    root.add(|s, ()| {
        let orders = s
            .state()
            .get::<Orders>("orders")
            .cloned()
            .unwrap_or(Orders(vec![]));
        s.state().set("total", 0u32);
        // A loop: each iteration is a step (it could add sub-steps or wait).
        s.for_each(orders.0, |s, i, amount| {
            if amount == 0 {
                trace(s, format!("  order #{i}: empty, skipped"));
                return s.continue_loop();
            }
            trace(s, format!("  order #{i}: {amount}"));
            *s.state().get_mut::<u32>("total").expect("set above") += amount;
            Ok(())
        });
        s.add(|s, ()| {
            let st = s.state();
            let name = st.get::<String>("name").cloned().unwrap_or_default();
            let total = *st.get::<u32>("total").expect("set above");
            let reply = format!("200 {name}, orders total {total}");
            trace(s, format!("reply: {reply}"));
            s.success((reply,))
        });
        Ok(())
    });
    root
}

/// `GET /user/404`: a lookup fails two levels down; the level-0 handler
/// recovers with a fallback and the flow goes on.
fn missing_user_request() -> AsyncSteps {
    let mut root = AsyncSteps::new();
    root.state().set("req", "GET /user/404");
    root.add_catch(
        |s, ()| {
            trace(s, "lookup: start");
            s.add(|s, ()| {
                call_backend(s, 4, false);
                Ok(())
            });
            s.add(|s, (found,): (bool,)| {
                if !found {
                    trace(s, "lookup: raising NotFound");
                    return s.error("NotFound", "no user with id 404");
                }
                s.success((String::from("someone"),))
            });
            Ok(())
        },
        |s, e| {
            let info = s.state().error_info().unwrap_or("").to_string();
            trace(
                s,
                format!("handler: caught {} ({info}), using guest", e.code()),
            );
            s.success((String::from("guest"),))
        },
    );
    root.add(|s, (name,): (String,)| {
        let reply = format!("200 hello, {name}");
        trace(s, format!("reply: {reply}"));
        s.success((reply,))
    });
    root
}

/// `GET /slow`: the backend needs 60 ms but the step allows 20 ms.
fn slow_request() -> AsyncSteps {
    let mut root = AsyncSteps::new();
    root.state().set("req", "GET /slow");
    root.add_catch(
        |s, ()| {
            trace(s, "backend: calling (limit 20 ms)");
            call_backend(s, 60, String::from("fresh data"));
            s.set_timeout(Duration::from_millis(20));
            s.set_cancel(|| line("GET /slow", "cancel callback: abort the backend call"));
            Ok(())
        },
        |s, e| {
            if !e.is(codes::TIMEOUT) {
                return Err(e.clone()); // not ours: let outer handlers see it
            }
            trace(s, "handler: Timeout, serving cached data");
            s.success((String::from("cached data"),))
        },
    );
    // A loop at level 0: three passes over the result.
    root.repeat(3, |s, i| {
        trace(s, format!("post-process pass {i}"));
        Ok(())
    });
    root.add(|s, ()| {
        let reply = String::from("200 cached data");
        trace(s, format!("reply: {reply}"));
        s.success((reply,))
    });
    root
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    START.get_or_init(Instant::now);
    let mut tool = AsyncTool::new()?;

    // Start all three; they run interleaved on the same loop.
    let requests = [
        (
            "GET /user/42",
            user_request().promise::<(String,)>(&mut tool),
        ),
        ("GET /user/404", missing_user_request().promise(&mut tool)),
        ("GET /slow", slow_request().promise(&mut tool)),
    ];

    let mut results = Vec::new();
    for (name, p) in requests {
        // block_on drives the whole loop, so the other flows progress too.
        results.push((name, tool.block_on(p)));
    }
    // Let the late backend reply arrive (and be refused) before exiting.
    tool.run_until_idle()?;

    println!();
    println!("summary:");
    let mut failed = 0;
    for (name, r) in &results {
        match r {
            Ok((reply,)) => println!("  {name:<14} -> {reply}"),
            Err(e) => {
                failed += 1;
                println!("  {name:<14} -> ERROR {e}");
            }
        }
    }
    let st = tool.stats();
    let ms = START.get().map_or(0.0, |t| t.elapsed().as_secs_f64() * 1e3);
    println!(
        "  {} flows, {} steps, {:.1} ms, {} flows still running",
        results.len(),
        st.steps,
        ms,
        st.flows
    );
    if failed > 0 {
        return Err(format!("{failed} request(s) failed").into());
    }
    Ok(())
}
