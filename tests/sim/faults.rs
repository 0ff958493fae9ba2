//! Faults, all drawn from the run's seed. A request's fate is a function of
//! the seed, its content and how many times the same request was made
//! before, not of the order in which requests happen to arrive, so the
//! iteration order of a hash map inside the code under test cannot change a
//! run.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::Value;
use tokio::time::Instant;

/// How likely each fault is in a run.
#[derive(Debug, Clone, Copy)]
pub struct Rates {
    /// A request lost on its way (never applied).
    pub lost_before: f64,
    /// A request applied, its answer lost.
    pub lost_after: f64,
    /// A request throttled, outside the throttling bursts.
    pub throttle: f64,
    /// An answer delayed 5–40 s (past any call's budget).
    pub slow: f64,
    /// An invocation whose host is killed at a random instant (its future
    /// dropped at the next await point).
    pub kill: f64,
    /// An invocation that crashes after the batch was processed, before
    /// the response reached Lambda.
    pub crash: f64,
    /// A handler attempt that fails transiently.
    pub transient: f64,
    /// A handler attempt that panics.
    pub panic: f64,
    /// A handler attempt that outlives the invocation.
    pub hang: f64,
}

impl Rates {
    pub const NONE: Rates = Rates {
        lost_before: 0.0,
        lost_after: 0.0,
        throttle: 0.0,
        slow: 0.0,
        kill: 0.0,
        crash: 0.0,
        transient: 0.0,
        panic: 0.0,
        hang: 0.0,
    };

    pub fn draw(rng: &mut StdRng) -> Self {
        let mut p = |max: f64| {
            if rng.random_bool(0.8) {
                rng.random_range(0.0..max)
            } else {
                0.0
            }
        };
        Rates {
            lost_before: p(0.03),
            lost_after: p(0.03),
            throttle: p(0.03),
            slow: p(0.01),
            kill: p(0.08),
            crash: p(0.05),
            transient: p(0.25),
            panic: p(0.03),
            hang: p(0.02),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Delivered,
    LostBefore,
    LostAfter,
    Throttled,
}

#[derive(Debug, Clone, Copy)]
pub struct RequestFate {
    pub fate: Fate,
    /// Latency before the request reaches the service.
    pub before: Duration,
    /// Latency of the answer.
    pub after: Duration,
}

/// What happens to one invocation of the function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invocation {
    Normal,
    /// The host dies this long after the invocation starts.
    KilledAfter(Duration),
    /// The function's process crashes after the batch, before answering.
    CrashesAfter,
}

/// What the handler does on one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    Ok(Duration),
    Transient,
    Panic,
    Hang,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub requests: u64,
    pub lost_before: u64,
    pub lost_after: u64,
    pub throttled: u64,
    pub slow: u64,
    pub killed: u64,
    pub crashed: u64,
}

#[derive(Debug)]
pub struct Faults {
    seed: u64,
    pub rates: Rates,
    /// Off while the world is set up.
    pub enabled: bool,
    seen: BTreeMap<u64, u32>,
    /// DynamoDB throttling bursts: (from, to).
    pub bursts: Vec<(Instant, Instant)>,
    /// During the bursts SQS refuses every request (throttled): an SQS
    /// outage, a scenario's choice; the campaign's bursts are DynamoDB's
    /// alone.
    pub sqs_outages: bool,
    pub counts: Counts,
}

/// FNV-1a, then SplitMix64: a stable hash (std's may change between
/// releases; this one must not, or recorded seeds would replay otherwise).
pub fn hash(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in *p {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    mix(h)
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// JSON with object keys and list members sorted, and without
/// `ClientRequestToken` (random per commit in idemq) or batch entry `Id`s:
/// the content a request's fate is keyed on.
pub fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            // Batch entries' `Id`s are positions in the batch, which may
            // come from a hash map's order.
            let mut fields: Vec<(&String, &Value)> = m
                .iter()
                .filter(|(k, _)| *k != "ClientRequestToken" && *k != "Id")
                .collect();
            fields.sort_unstable_by_key(|(k, _)| *k);
            out.push('{');
            for (k, v) in fields {
                out.push_str(k);
                out.push(':');
                canonical(v, out);
                out.push(',');
            }
            out.push('}');
        }
        Value::Array(a) => {
            // Sorted too: code under test may fill a list from a hash map.
            let mut parts: Vec<String> = a
                .iter()
                .map(|x| {
                    let mut s = String::new();
                    canonical(x, &mut s);
                    s
                })
                .collect();
            parts.sort();
            out.push('[');
            for p in parts {
                out.push_str(&p);
                out.push(',');
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

impl Faults {
    pub fn new(seed: u64, rates: Rates) -> Self {
        Self {
            seed,
            rates,
            enabled: false,
            seen: BTreeMap::new(),
            bursts: Vec::new(),
            sqs_outages: false,
            counts: Counts::default(),
        }
    }

    fn rng(&self, parts: &[&[u8]]) -> StdRng {
        let seed = self.seed.to_le_bytes();
        let mut all: Vec<&[u8]> = vec![&seed];
        all.extend_from_slice(parts);
        StdRng::seed_from_u64(hash(&all))
    }

    pub fn request(&mut self, service: &str, op: &str, body: &Value) -> RequestFate {
        self.counts.requests += 1;
        let mut content = String::new();
        canonical(body, &mut content);
        let key = hash(&[service.as_bytes(), op.as_bytes(), content.as_bytes()]);
        let nth = {
            let n = self.seen.entry(key).or_default();
            *n += 1;
            *n
        };
        let mut rng = self.rng(&[&key.to_le_bytes(), &nth.to_le_bytes()]);
        let before = Duration::from_micros(rng.random_range(1_000..15_000));
        let mut after = Duration::from_micros(rng.random_range(1_000..15_000));
        if !self.enabled {
            return RequestFate {
                fate: Fate::Delivered,
                before,
                after,
            };
        }
        let r = self.rates;
        let now = Instant::now();
        let in_burst = self.bursts.iter().any(|(a, b)| *a <= now && now < *b);
        let throttle = match (in_burst, service) {
            (true, "dynamodb") => 0.7,
            (true, _) if self.sqs_outages => 1.0,
            _ => r.throttle,
        };
        let fate = if rng.random_bool(throttle) {
            self.counts.throttled += 1;
            Fate::Throttled
        } else if rng.random_bool(r.lost_before) {
            self.counts.lost_before += 1;
            Fate::LostBefore
        } else if rng.random_bool(r.lost_after) {
            self.counts.lost_after += 1;
            Fate::LostAfter
        } else {
            Fate::Delivered
        };
        if rng.random_bool(r.slow) {
            self.counts.slow += 1;
            after += Duration::from_millis(rng.random_range(5_000..40_000));
        }
        RequestFate {
            fate,
            before,
            after,
        }
    }

    pub fn invocation(&mut self, n: u64, timeout: Duration) -> Invocation {
        let mut rng = self.rng(&[b"invocation", &n.to_le_bytes()]);
        if !self.enabled {
            return Invocation::Normal;
        }
        if rng.random_bool(self.rates.kill) {
            self.counts.killed += 1;
            let ms = rng.random_range(0..timeout.as_millis() as u64);
            Invocation::KilledAfter(Duration::from_millis(ms))
        } else if rng.random_bool(self.rates.crash) {
            self.counts.crashed += 1;
            Invocation::CrashesAfter
        } else {
            Invocation::Normal
        }
    }

    /// Life `n` of a local worker process (tests/sim/worker.rs): killed
    /// after a time (10 s to 2 h) and restarted after a pause (1 s to 2
    /// min), half the time; otherwise it lives until it exits idle.
    pub fn worker_life(&mut self, n: u64) -> Option<(Duration, Duration)> {
        let mut rng = self.rng(&[b"worker", &n.to_le_bytes()]);
        if !self.enabled || !rng.random_bool(0.5) {
            return None;
        }
        self.counts.killed += 1;
        Some((
            Duration::from_millis(rng.random_range(10_000..7_200_000)),
            Duration::from_millis(rng.random_range(1_000..120_000)),
        ))
    }

    /// One handler attempt, from the job, the copy and the attempt number.
    pub fn attempt(&self, job: &str, message_id: &str, attempt: u32) -> Attempt {
        let mut rng = self.rng(&[
            job.as_bytes(),
            message_id.as_bytes(),
            &attempt.to_le_bytes(),
        ]);
        let r = self.rates;
        if rng.random_bool(r.transient) {
            Attempt::Transient
        } else if rng.random_bool(r.panic) {
            Attempt::Panic
        } else if rng.random_bool(r.hang) {
            Attempt::Hang
        } else {
            Attempt::Ok(Duration::from_millis(rng.random_range(5..800)))
        }
    }
}
