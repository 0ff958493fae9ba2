//! A running `scripts/chaos_proxy.py` in front of the DynamoDB emulator.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A running `scripts/chaos_proxy.py` in front of the DynamoDB emulator.
pub struct Proxy {
    child: Child,
    port: u16,
    control: PathBuf,
    stats: PathBuf,
}

impl Proxy {
    pub fn start(dir: &std::path::Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let upstream = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").unwrap();
        let upstream = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let control = dir.join("control.json");
        let stats = dir.join("stats.json");
        std::fs::write(&control, "{}").unwrap();
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/chaos_proxy.py");
        let child = Command::new("python3")
            .arg(script)
            .args(["--port", &port.to_string(), "--upstream", &upstream])
            .arg("--control")
            .arg(&control)
            .arg("--stats")
            .arg(&stats)
            .spawn()
            .unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < until, "the proxy did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self {
            child,
            port,
            control,
            stats,
        }
    }

    pub fn set(&self, control: serde_json::Value) {
        let tmp = self.control.with_extension("tmp");
        std::fs::write(&tmp, control.to_string()).unwrap();
        std::fs::rename(tmp, &self.control).unwrap();
    }

    pub fn stats(&self) -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(&self.stats).unwrap_or_else(|_| "{}".into()))
            .unwrap()
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
