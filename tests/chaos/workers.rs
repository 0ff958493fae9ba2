//! Worker processes of the probe (tests/support/lambda_probe.rs built with
//! failpoints), restarted when a fault kills them.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use idemq::dlq::peek::Peek;
use idemq::init::InitReport;

use crate::common::unique;

pub fn probe() -> PathBuf {
    let p = PathBuf::from(std::env::var("CHAOS_PROBE").expect(
        "CHAOS_PROBE is not set: run the chaos suite with `make test-chaos` (scripts/chaos.sh builds the probe with failpoints)",
    ));
    assert!(p.exists(), "{} does not exist", p.display());
    p
}

/// The ledger example (examples/ledger.rs) built with failpoints, for the
/// follow-up scenario: `CHAOS_LEDGER`, set by scripts/chaos.sh.
pub fn ledger() -> PathBuf {
    let p = PathBuf::from(std::env::var("CHAOS_LEDGER").expect(
        "CHAOS_LEDGER is not set: run the chaos suite with `make test-chaos` (scripts/chaos.sh builds the ledger with failpoints)",
    ));
    assert!(p.exists(), "{} does not exist", p.display());
    p
}

/// Jobs per scenario: `CHAOS_JOBS` (the smaller run in `make test` uses
/// fewer than `make test-chaos`).
pub fn jobs(full: usize) -> usize {
    std::env::var("CHAOS_JOBS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .map_or(full, |n| n.min(full))
}

pub fn scratch() -> PathBuf {
    let d = std::env::temp_dir().join(unique("chaos"));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Worker processes of the probe, restarted when a fault kills them.
pub struct Workers {
    /// The worker binary: the probe, or the ledger ([`ledger`]).
    bin: PathBuf,
    res: InitReport,
    env: Vec<(String, String)>,
    args: Vec<String>,
    dir: PathBuf,
    pub children: Vec<Child>,
    spawned: usize,
    /// Workers that died (failpoint abort or SIGKILL) and were replaced.
    pub restarts: usize,
}

impl Workers {
    /// `n` workers with these extra variables and arguments, logging to a
    /// scratch folder of their own.
    pub fn start(res: &InitReport, env: &[(&str, &str)], args: &[&str], n: usize) -> Self {
        Self::start_bin(probe(), res, env, args, n)
    }

    /// [`Workers::start`] with another worker binary ([`ledger`]).
    pub fn start_bin(
        bin: PathBuf,
        res: &InitReport,
        env: &[(&str, &str)],
        args: &[&str],
        n: usize,
    ) -> Self {
        let mut all_env: Vec<(String, String)> = vec![
            ("IDEMQ_TABLE".into(), res.table_name.clone()),
            ("IDEMQ_BACKOFF_BASE".into(), "1s".into()),
            ("IDEMQ_BACKOFF_CAP".into(), "2s".into()),
            ("IDEMQ_LOG".into(), "debug".into()),
        ];
        all_env.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let mut w = Self {
            bin,
            res: res.clone(),
            env: all_env,
            args: args.iter().map(|s| s.to_string()).collect(),
            dir: scratch(),
            children: Vec::new(),
            spawned: 0,
            restarts: 0,
        };
        for _ in 0..n {
            w.spawn();
        }
        w
    }

    pub fn spawn(&mut self) {
        let n = self.spawned;
        self.spawned += 1;
        let out = File::create(self.dir.join(format!("worker-{n}.out"))).unwrap();
        let err = File::create(self.dir.join(format!("worker-{n}.err"))).unwrap();
        let child = Command::new(&self.bin)
            .args(["--queue-url", &self.res.queue_url, "--exit-when-idle", "8"])
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env_remove("AWS_LAMBDA_RUNTIME_API")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap();
        self.children.push(child);
    }

    /// Restarts dead workers until every one has exited on its own (idle),
    /// then returns. `during` runs between polls (to inject faults).
    pub async fn run(&mut self, limit: Duration, mut during: impl FnMut(&mut Vec<Child>)) {
        let start = Instant::now();
        loop {
            assert!(
                start.elapsed() < limit,
                "workers did not finish within {limit:?}"
            );
            during(&mut self.children);
            let mut alive = Vec::new();
            let mut died = 0;
            for mut c in self.children.drain(..) {
                match c.try_wait().unwrap() {
                    None => alive.push(c),
                    Some(status) if status.success() => {}
                    Some(_) => died += 1,
                }
            }
            self.children = alive;
            self.restarts += died;
            for _ in 0..died {
                self.spawn();
            }
            if self.children.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Runs until the workers are done and the queue is empty. A kill can
    /// leave a message in flight after every worker went idle and exited
    /// (received by a process that died, back only after its visibility
    /// timeout): that is not a loss, so fresh workers take what is left, a
    /// few rounds at most, and the caller's checker decides.
    pub async fn run_until_empty(
        &mut self,
        sdk: &aws_config::SdkConfig,
        limit: Duration,
        mut during: impl FnMut(&mut Vec<Child>),
    ) {
        self.run(limit, &mut during).await;
        let peek = Peek::new(
            aws_sdk_sqs::Client::new(sdk),
            &self.res.queue_url,
            Duration::from_secs(1),
        );
        for round in 1..=3 {
            let depth = peek.depth().await.unwrap();
            if depth.total() == 0 {
                return;
            }
            eprintln!(
                "round {round}: {depth:?} left on the queue after the workers exited; starting one more"
            );
            self.spawn();
            self.run(limit, |_| {}).await;
        }
        assert_eq!(
            peek.depth().await.unwrap().total(),
            0,
            "messages stuck on the queue"
        );
    }

    /// Sum of the workers' exit summaries: (succeeded, duplicate).
    pub fn totals(&self) -> (u64, u64) {
        let mut t = (0, 0);
        for n in 0..self.spawned {
            let out = std::fs::read_to_string(self.dir.join(format!("worker-{n}.out")))
                .unwrap_or_default();
            for line in out.lines().filter(|l| l.starts_with("idemq worker: ")) {
                t.0 += field(line, "succeeded ");
                t.1 += field(line, "duplicate ");
            }
        }
        t
    }

    /// Everything the workers printed.
    pub fn logs(&self) -> String {
        (0..self.spawned)
            .flat_map(|n| ["out", "err"].map(|e| self.dir.join(format!("worker-{n}.{e}"))))
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .collect()
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn field(line: &str, name: &str) -> u64 {
    line.split(name)
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
