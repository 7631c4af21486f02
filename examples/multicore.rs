//! Spreads 100,000 flows over every core's loop and prints what each loop ran.
//!
//! Run with `cargo run --release --example multicore`. Half of the flows
//! are spawned from this (non-loop) thread and go to the shared queue that
//! all loops take from; the other half are spawned by those flows from
//! inside a step, so they start on the spawning flow's own loop unless an
//! idle peer steals them first.

use futoin_asyncsteps::runtime::{PinStatus, Runtime};
use futoin_asyncsteps::{AsyncSteps, Promise};
use std::hint::black_box;
use std::time::Instant;

const FLOWS: usize = 100_000;

/// A small flow: a short loop of arithmetic, a sub-step, and a result.
fn work(seed: u64) -> AsyncSteps {
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        s.repeat(20, move |_, i| {
            black_box(seed.wrapping_mul(i as u64 + 1));
            Ok(())
        });
        Ok(())
    });
    root.add(move |s, ()| {
        s.add(move |s, ()| s.success((seed % 7,)));
        Ok(())
    });
    root
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rt = Runtime::new()?;
    let h = rt.handle();
    let t = Instant::now();

    // Each outer flow spawns one inner flow from its own loop and waits
    // for it, then adds the results.
    let outer: Vec<Promise<(u64,)>> = (0..FLOWS / 2)
        .map(|i| {
            let h = h.clone();
            let mut root = work(i as u64);
            root.add(move |s, (a,): (u64,)| {
                let inner = h.spawn::<(u64,)>(work(i as u64 + 1));
                s.await_future(async move { inner.await.map(|(b,)| (a + b,)) });
                Ok(())
            });
            rt.spawn(root)
        })
        .collect();
    let mut sum = 0u64;
    for p in outer {
        sum += p.wait()?.0;
    }
    let elapsed = t.elapsed();

    // Let every loop publish the counters of its last turn.
    for i in 0..rt.loops() {
        let (tx, rx) = std::sync::mpsc::channel();
        rt.loop_handle(i)
            .expect("loop")
            .call(move |_| tx.send(()).expect("reply"));
        rx.recv()?;
    }

    println!(
        "{FLOWS} flows on {} loops in {:.1} ms (checksum {sum})",
        rt.loops(),
        elapsed.as_secs_f64() * 1e3
    );
    println!(
        "{:>4} | {:>10} | {:>9} | {:>9} | {:>10} | {:>7}",
        "loop", "pinned to", "started", "stolen", "steps", "share"
    );
    println!(
        "{:-<4}-|-{:-<10}-|-{:-<9}-|-{:-<9}-|-{:-<10}-|-{:-<7}",
        "", "", "", "", "", ""
    );
    for st in rt.stats() {
        let pin = match &st.pin {
            PinStatus::Pinned(c) => format!("core {c}"),
            PinStatus::Off => "off".to_owned(),
            PinStatus::Failed(why) => format!("failed: {why}"),
            other => format!("{other:?}"),
        };
        println!(
            "{:>4} | {:>10} | {:>9} | {:>9} | {:>10} | {:>6.1}%",
            st.index,
            pin,
            st.started,
            st.stolen,
            st.steps,
            100.0 * st.started as f64 / FLOWS as f64
        );
    }
    let started: u64 = rt.stats().iter().map(|s| s.started).sum();
    assert_eq!(started, FLOWS as u64, "every flow started exactly once");
    rt.shutdown();
    Ok(())
}
