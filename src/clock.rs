//! The wall clock and the backoff's jitter, injectable.
//!
//! Instants and sleeps come from tokio's clock everywhere in idemq, so a
//! test that pauses it drives every deadline. Timestamps (a message's age
//! from its `SentTimestamp`, a marker's `expires_at`, a failure record's
//! `failed_at`) come from [`now`], and the retry jitter from `with_jitter`:
//! by default `SystemTime::now()` and a per-thread generator seeded from
//! the OS, and on a thread that called [`simulate`], a wall clock that
//! moves with tokio's (paused) clock and a generator seeded by the
//! simulation, so that a simulated run is a pure function of its seed
//! (`tests/simulation.rs`). The override is per thread: other threads, and
//! every production process, keep the real ones.
//!
//! The generator is `Jitter`, a SplitMix64: jitter needs spread, not
//! secrecy, and a few lines of arithmetic are all a Lambda bootstrap then
//! carries (no ChaCha, no thread-local reseeding).

use std::cell::{Cell, RefCell};
use std::convert::Infallible;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::time::SystemTime;

use tokio::time::Instant;

thread_local! {
    /// (wall time at `origin`, `origin` on tokio's clock).
    static VIRTUAL_WALL: Cell<Option<(SystemTime, Instant)>> = const { Cell::new(None) };
    /// The simulation's seeded generator, while one runs on this thread.
    static SEEDED: RefCell<Option<Jitter>> = const { RefCell::new(None) };
    /// This thread's generator, seeded from the OS on first use.
    static REAL: RefCell<Jitter> = RefCell::new(Jitter::from_os());
}

/// The wall clock: `SystemTime::now()`, or on a simulated thread the
/// simulation's epoch plus the time tokio's clock has moved since.
pub fn now() -> SystemTime {
    match VIRTUAL_WALL.get() {
        Some((epoch, origin)) => epoch + origin.elapsed(),
        None => SystemTime::now(),
    }
}

/// Whether this thread runs a simulation ([`simulate`]).
pub(crate) fn is_simulated() -> bool {
    VIRTUAL_WALL.get().is_some()
}

/// Runs `f` with the jitter source: this thread's generator, or on a
/// simulated thread the generator seeded by [`simulate`].
pub(crate) fn with_jitter<T>(f: impl FnOnce(&mut dyn rand::Rng) -> T) -> T {
    SEEDED.with_borrow_mut(|seeded| match seeded {
        Some(rng) => f(rng),
        None => REAL.with_borrow_mut(|rng| f(rng)),
    })
}

/// 128 random bits from this thread's generator (never the simulation's:
/// drawing them leaves a simulated run's jitter as it was), for values that
/// must differ between calls, such as a request token.
pub(crate) fn random_u128() -> u128 {
    REAL.with_borrow_mut(|rng| (u128::from(rng.next()) << 64) | u128::from(rng.next()))
}

/// From now on this thread's wall clock reads `epoch` plus the time tokio's
/// clock (call it inside the runtime) moves from here, and the jitter comes
/// from a generator seeded with `seed`. Until [`real`] is called. No
/// backtrace of a failure is captured meanwhile: its frames name the
/// harness's own call sites, and naming them takes real time, neither of
/// which a replay of the seed may depend on.
#[cfg(any(test, feature = "testing"))]
pub fn simulate(epoch: SystemTime, seed: u64) {
    VIRTUAL_WALL.set(Some((epoch, Instant::now())));
    SEEDED.set(Some(Jitter::seeded(seed)));
}

/// Back to the real wall clock and jitter on this thread.
#[cfg(any(test, feature = "testing"))]
pub fn real() {
    VIRTUAL_WALL.set(None);
    SEEDED.set(None);
}

/// The jitter generator: SplitMix64 (Steele, Lea and Flood, "Fast
/// splittable pseudorandom number generators", OOPSLA 2014), the same
/// sequence for the same seed. Not for secrets.
#[derive(Debug, Clone)]
pub(crate) struct Jitter {
    state: u64,
}

impl Jitter {
    /// A generator whose sequence is a function of `seed`.
    pub(crate) fn seeded(seed: u64) -> Self {
        Self { state: seed }
    }

    /// A generator seeded from the OS (through the random keys std gives
    /// each thread's `HashMap`s).
    pub(crate) fn from_os() -> Self {
        Self::seeded(RandomState::new().build_hasher().finish())
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// `rand`'s generator trait (infallible, so [`rand::Rng`]), for
/// [`Backoff::delay`](crate::backoff::Backoff::delay) and `rand::RngExt`.
impl rand::TryRng for Jitter {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        Ok((self.next() >> 32) as u32)
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        Ok(self.next())
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        for chunk in dst.chunks_mut(8) {
            let bytes = self.next().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
        Ok(())
    }
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
        let a: [u64; 2] = with_jitter(|r| [r.random(), r.random()]);
        simulate(epoch, 7);
        let b0: u64 = with_jitter(|r| r.random());
        // Tokens come from the thread's own generator: the seeded sequence
        // goes on as if none had been drawn.
        let _ = random_u128();
        let b1: u64 = with_jitter(|r| r.random());
        assert_eq!(a, [b0, b1], "same seed, same jitter");
        real();
        let wall = SystemTime::now();
        let read = now();
        assert!(
            read.duration_since(wall)
                .is_ok_and(|d| d < Duration::from_secs(60)),
            "real clock again"
        );
    }

    #[test]
    fn splitmix64_matches_its_reference_sequence() {
        // The first outputs for seed 1234567 of the reference C
        // implementation (https://prng.di.unimi.it/splitmix64.c).
        let mut g = Jitter::seeded(1_234_567);
        let first: Vec<u64> = (0..3).map(|_| g.next()).collect();
        assert_eq!(
            first,
            [
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423
            ]
        );
    }

    #[test]
    fn jitter_is_spread_and_threads_differ() {
        let mut g = Jitter::from_os();
        let draws: std::collections::HashSet<u64> =
            (0..1000).map(|_| g.random_range(0..=1_000_000)).collect();
        assert!(draws.len() > 990, "{} distinct of 1000", draws.len());
        let here = random_u128();
        let there = std::thread::spawn(random_u128).join().unwrap();
        assert_ne!(here, there);
        assert_ne!(random_u128(), here);
    }
}
