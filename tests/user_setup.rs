//! `idemq::run` in a program that set up its own observability:
//! a global `tracing` subscriber and a panic hook installed before `run`
//! are both left in place. One test in this file: it sets process-wide
//! state (the global subscriber, the panic hook, environment variables).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use idemq::{JobMeta, handler_fn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The program's own subscriber: records every event's target and message.
struct Recorder(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Recorder {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        self.0
            .lock()
            .unwrap()
            .push(event.metadata().target().to_owned());
    }
}

static USER_HOOK_CALLS: AtomicUsize = AtomicUsize::new(0);

#[tokio::test]
async fn run_keeps_the_programs_subscriber_and_panic_hook() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    tracing_subscriber::registry()
        .with(Recorder(Arc::clone(&seen)))
        .init();
    std::panic::set_hook(Box::new(|_| {
        USER_HOOK_CALLS.fetch_add(1, Ordering::SeqCst);
    }));
    // SAFETY: the only test in this process; no other thread reads the
    // environment while it is changed.
    unsafe {
        // The Lambda path, which fails fast at configuration: no table.
        std::env::set_var("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9");
        std::env::set_var("AWS_REGION", "us-east-1");
        std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
        std::env::set_var("IDEMQ_LOG", "not=a=filter");
        std::env::remove_var("IDEMQ_TABLE");
    }
    let handler = handler_fn(|_: serde_json::Value, _: JobMeta| async {
        Ok(idemq::store::dynamodb::Effect::new())
    });
    let err = idemq::run(handler).await.expect_err("no IDEMQ_TABLE");
    assert!(err.to_string().contains("IDEMQ_TABLE"), "{err}");

    // The panic hook is still the program's.
    let panicked = std::thread::spawn(|| panic!("a panic after idemq::run")).join();
    assert!(panicked.is_err());
    assert_eq!(USER_HOOK_CALLS.load(Ordering::SeqCst), 1);

    // The subscriber is still the program's, and idemq, which installed
    // nothing, did not log its invalid-IDEMQ_LOG warning as if it had.
    tracing::info!(target: "after_run", "still mine");
    let seen = seen.lock().unwrap();
    assert!(seen.iter().any(|t| t == "after_run"), "{seen:?}");
    assert!(!seen.iter().any(|t| t == "idemq"), "{seen:?}");
}
