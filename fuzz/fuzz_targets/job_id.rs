//! Message decoding and job-id resolution on arbitrary input: never a
//! panic; a resolved id is always one `JobId::new` accepts; a refusal is
//! always a displayable error.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../src/job.rs"]
mod job;

#[derive(arbitrary::Arbitrary, Debug)]
struct Input {
    attribute: Option<String>,
    pointer: Option<String>,
    body: String,
    message_id: String,
}

/// The ledger example's job, as the batch handler would decode it.
#[allow(dead_code)]
#[derive(serde::Deserialize)]
struct Transfer {
    transfer_id: String,
    account: String,
    amount: i64,
}

fuzz_target!(|input: Input| {
    let mut resolver = job::JobIdResolver::new();
    if let Some(p) = input.pointer {
        resolver = resolver.with_body_pointer(p);
    }
    match resolver.resolve(input.attribute.as_deref(), &input.body, &input.message_id) {
        Ok((id, _)) => {
            assert!(job::JobId::new(id.as_str()).is_ok());
            assert!(id.as_str().len() <= job::MAX_JOB_ID_BYTES);
            assert_eq!(id.downstream_key("step").len(), 64);
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    let _ = serde_json::from_str::<Transfer>(&input.body);
    assert_eq!(job::PayloadHash::of(input.body.as_bytes()).as_str().len(), 64);
});
