//! Runs a simulation's independent schedules over the cores and sums their figures: schedule
//! `i` goes to thread `i % threads`, and a thread stops at its first violation. Shared by the
//! plans' simulation (`tests/sim`) and Instance HA's (`tests/instance_ha/sim.rs`).

use std::ops::AddAssign;

/// Runs `run(i)` for every `i` in `0..n`, spread over the cores; the sum of the figures, or
/// the first violation (in thread order).
pub fn over_cores<S, V>(n: u64, run: impl Fn(u64) -> Result<S, V> + Sync) -> Result<S, V>
where
    S: Default + AddAssign + Send,
    V: Send,
{
    let threads = std::thread::available_parallelism().map_or(1, |p| p.get()) as u64;
    let run = &run;
    let outcomes: Vec<Result<S, V>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mut total = S::default();
                    for i in (t..n).step_by(threads as usize) {
                        total += run(i)?;
                    }
                    Ok(total)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a simulation thread panicked"))
            .collect()
    });
    let mut total = S::default();
    for o in outcomes {
        total += o?;
    }
    Ok(total)
}
