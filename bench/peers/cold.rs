//! Cold starts: a fresh function process per measurement.

use super::*;

/// Python's own account of its imports (`init: imports N ms` on stderr).
pub(crate) fn imports_ms(log: &std::path::Path) -> Option<f64> {
    std::fs::read_to_string(log)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("init: imports "))
        .and_then(|s| s.trim_end_matches(" ms").parse().ok())
}

/// Cold starts: start, first invocation (batch 10), 20 warm ones, max RSS.
pub(crate) async fn cold(b: &Bench, peer: Peer) -> Result<ColdStart, Error> {
    b.set_delay(0);
    let (mut inits, mut firsts, mut warms, mut rss, mut imports) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..b.args.cold_starts {
        let tag = format!("cold{i}");
        let (mut inst, init) = b.spawn(peer, 10, &tag).await?;
        let mut jobs = Jobs::new(format!("{}-{tag}-{}", b.run, peer.name()));
        let arn = &b.resources[&peer].queue_arn;
        let (answer, first) = inst.invoke(event(arn, &jobs.batch(10))).await?;
        if failures(&answer, 10) != 0 {
            return Err(format!("{}: cold batch failed: {answer:?}", peer.name()).into());
        }
        let mut w = Vec::new();
        for _ in 0..20 {
            let (_, took) = inst.invoke(event(arn, &jobs.batch(10))).await?;
            w.push(took.as_secs_f64() * 1000.0);
        }
        inits.push(init.as_secs_f64() * 1000.0);
        firsts.push(first.as_secs_f64() * 1000.0);
        warms.push(median(&w));
        rss.push(inst.max_rss().unwrap_or(0) as f64 / 1048576.0);
        let label = inst.label.clone();
        drop(inst);
        if let Some(ms) = imports_ms(&b.logs.join(format!("{label}.log"))) {
            imports.push(ms);
        }
    }
    let c = ColdStart {
        peer,
        host: "emulator".into(),
        samples: inits.len(),
        init_ms: median(&inits),
        init_ms_all: inits,
        first_invoke_ms: median(&firsts),
        warm_invoke_ms: median(&warms),
        max_rss_mb: rss.iter().copied().fold(0.0, f64::max),
        imports_ms: (!imports.is_empty()).then(|| median(&imports)),
    };
    println!(
        "  {:<10} init {:>6.1} ms (median of {}; all {:?}), first batch {:.1} ms, warm batch {:.1} ms, max RSS {:.1} MB",
        peer.name(),
        c.init_ms,
        c.samples,
        c.init_ms_all.iter().map(|x| x.round()).collect::<Vec<_>>(),
        c.first_invoke_ms,
        c.warm_invoke_ms,
        c.max_rss_mb
    );
    Ok(c)
}

/// POSTs `body` to `addr` (`host:port`) and returns the answer.
pub(crate) async fn post(addr: &str, path: &str, body: Vec<u8>) -> Result<http::Message, Error> {
    let s = TcpStream::connect(addr).await?;
    let (r, mut w) = s.into_split();
    http::Message::request("POST", path)
        .with_header("host", addr)
        .with_header("content-type", "application/json")
        .with_header("connection", "close")
        .with_body(body)
        .write(&mut w)
        .await?;
    Ok(http::Message::read(&mut BufReader::new(r), true)
        .await?
        .ok_or("no answer")?)
}

/// One cold start under `cargo lambda watch --only-lambda-apis`: watch
/// serves the Runtime API and the invoke API; the function is started by
/// hand, through a proxy that notes its first request (the end of init)
/// and puts a real deadline in place of watch's constant one.
pub(crate) async fn watch_cold(b: &Bench, peer: Peer) -> Result<ColdStart, Error> {
    b.set_delay(0);
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?.port()
    };
    let addr = format!("127.0.0.1:{port}");
    let log = b.logs.join(format!("watch-{}.log", peer.name()));
    let mut watch = Command::new(&b.args.cargo_lambda)
        .args([
            "lambda",
            "watch",
            "--only-lambda-apis",
            "-A",
            "127.0.0.1",
            "-P",
        ])
        .arg(port.to_string())
        .current_dir(&b.root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()?;
    let result = async {
        let until = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(&addr).await.is_err() {
            if Instant::now() > until {
                return Err::<ColdStart, Error>("cargo lambda watch did not listen".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let relay = Proxy::start(&addr, Some(runtime::FUNCTION_TIMEOUT)).await?;
        let mut cmd = b.command(peer, 10);
        let fn_log = b.logs.join(format!("watch-fn-{}.log", peer.name()));
        cmd.env("AWS_LAMBDA_RUNTIME_API", format!("{}/.rt", relay.url()))
            .env("AWS_LAMBDA_FUNCTION_NAME", "_")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&fn_log)?);
        let spawned = Instant::now();
        let mut child = cmd.spawn()?;
        let pid = child.id();
        let outcome = async {
            let until = Instant::now() + Duration::from_secs(60);
            let init = loop {
                if let Some(at) = relay.first_request() {
                    break at.duration_since(spawned);
                }
                if Instant::now() > until {
                    return Err::<ColdStart, Error>("the function never asked for an event".into());
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            };
            let arn = &b.resources[&peer].queue_arn;
            let mut jobs = Jobs::new(format!("{}-watch-{}", b.run, peer.name()));
            let path = "/2015-03-31/functions/_/invocations";
            let t = Instant::now();
            let answer = post(&addr, path, event(arn, &jobs.batch(10))).await?;
            let first = t.elapsed();
            if failures(&Ok(answer.body.clone()), 10) != 0 {
                return Err(format!("cold batch failed: {}", String::from_utf8_lossy(&answer.body)).into());
            }
            let mut w = Vec::new();
            for _ in 0..20 {
                let t = Instant::now();
                post(&addr, path, event(arn, &jobs.batch(10))).await?;
                w.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            let rss = runtime::peak_rss(pid).unwrap_or(0) as f64 / 1048576.0;
            Ok(ColdStart {
                peer,
                host: "cargo lambda watch".into(),
                samples: 1,
                init_ms: init.as_secs_f64() * 1000.0,
                init_ms_all: vec![init.as_secs_f64() * 1000.0],
                first_invoke_ms: first.as_secs_f64() * 1000.0,
                warm_invoke_ms: median(&w),
                max_rss_mb: rss,
                imports_ms: None,
            })
        }
        .await;
        let _ = child.kill();
        let _ = child.wait();
        let mut c = outcome?;
        c.imports_ms = imports_ms(&fn_log);
        println!(
            "  {:<10} init {:>6.1} ms, first batch {:.1} ms, warm batch {:.1} ms (through watch's invoke API), max RSS {:.1} MB",
            peer.name(),
            c.init_ms,
            c.first_invoke_ms,
            c.warm_invoke_ms,
            c.max_rss_mb
        );
        Ok(c)
    }
    .await;
    // Only the watch process this function started, by its pid.
    let _ = watch.kill();
    let _ = watch.wait();
    result
}
