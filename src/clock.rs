//! The wall clock and the backoff's jitter, injectable.
//!
//! Instants and sleeps come from tokio's clock everywhere in idemq, so a
//! test that pauses it drives every deadline. Timestamps (a message's age
//! from its `SentTimestamp`, a marker's `expires_at`, a failure record's
//! `failed_at`) come from [`now`], and the retry jitter from `with_jitter`:
//! by default `SystemTime::now()` and `rand::rng()`, and on a thread that
//! called [`simulate`], a wall clock that moves with tokio's (paused) clock
//! and a seeded generator, so that a simulated run is a pure function of
//! its seed (`tests/simulation.rs`). The override is per thread: other
//! threads, and every production process, keep the real ones.

use std::cell::{Cell, RefCell};
use std::time::SystemTime;

use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::time::Instant;

thread_local! {
    /// (wall time at `origin`, `origin` on tokio's clock).
    static VIRTUAL_WALL: Cell<Option<(SystemTime, Instant)>> = const { Cell::new(None) };
    static JITTER: RefCell<Option<StdRng>> = const { RefCell::new(None) };
}

/// The wall clock: `SystemTime::now()`, or on a simulated thread the
/// simulation's epoch plus the time tokio's clock has moved since.
pub fn now() -> SystemTime {
    match VIRTUAL_WALL.get() {
        Some((epoch, origin)) => epoch + origin.elapsed(),
        None => SystemTime::now(),
    }
}

/// Runs `f` with the jitter source: `rand::rng()`, or on a simulated
/// thread the generator seeded by [`simulate`].
pub(crate) fn with_jitter<T>(f: impl FnOnce(&mut dyn rand::Rng) -> T) -> T {
    JITTER.with_borrow_mut(|seeded| match seeded {
        Some(rng) => f(rng),
        None => f(&mut rand::rng()),
    })
}

/// From now on this thread's wall clock reads `epoch` plus the time tokio's
/// clock (call it inside the runtime) moves from here, and the jitter comes
/// from a generator seeded with `seed`. Until [`real`] is called.
pub fn simulate(epoch: SystemTime, seed: u64) {
    VIRTUAL_WALL.set(Some((epoch, Instant::now())));
    JITTER.set(Some(StdRng::seed_from_u64(seed)));
}

/// Back to the real wall clock and jitter on this thread.
pub fn real() {
    VIRTUAL_WALL.set(None);
    JITTER.set(None);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngExt;
    use std::time::{Duration, UNIX_EPOCH};

    #[tokio::test(start_paused = true)]
    async fn a_simulated_thread_reads_virtual_time_and_seeded_jitter() {
        let epoch = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        simulate(epoch, 7);
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(now(), epoch + Duration::from_secs(3600));
        let a: u64 = with_jitter(|r| r.random());
        simulate(epoch, 7);
        let b: u64 = with_jitter(|r| r.random());
        assert_eq!(a, b, "same seed, same jitter");
        real();
        let wall = SystemTime::now();
        let read = now();
        assert!(
            read.duration_since(wall)
                .is_ok_and(|d| d < Duration::from_secs(60)),
            "real clock again"
        );
    }
}
