//! The producer's unit tests: the attribute budget, batch packing, FIFO
//! deduplication ids and the refusals made before any request.

use std::ops::Range;

use super::batches::pack;
use super::*;

#[test]
fn the_job_id_attribute_is_counted_once() {
    let names = ["a".to_string(), "idemq-job-id".to_string()];
    assert_eq!(attributes_with_job_id(&names), 2);
    assert_eq!(spare_attribute_slots(&names), 8);
    let none: [String; 0] = [];
    assert_eq!(attributes_with_job_id(&none), 1);
    let full: Vec<String> = (0..10).map(|i| format!("a{i}")).collect();
    assert_eq!(
        spare_attribute_slots(&full),
        0,
        "already over: no slot left"
    );
}

#[test]
fn packing_respects_ten_entries_and_the_size_limit() {
    assert_eq!(pack(&[1; 25], 1000), vec![0..10, 10..20, 20..25]);
    assert_eq!(pack(&[400, 400, 400, 100], 1000), vec![0..2, 2..4]);
    assert_eq!(pack(&[1000, 1, 1000], 1000), vec![0..1, 1..2, 2..3]);
    assert_eq!(pack(&[], 1000), Vec::<Range<usize>>::new());
    // An entry alone over the limit still gets a batch (check() refuses
    // such jobs before packing; pack never loops or drops one).
    assert_eq!(pack(&[2000], 1000), vec![0..1]);
    let sizes: Vec<usize> = (0..97).map(|i| (i * 37) % 300 + 1).collect();
    let batches = pack(&sizes, 1000);
    assert_eq!(batches.iter().map(|r| r.len()).sum::<usize>(), 97);
    for r in &batches {
        assert!(r.len() <= 10 && sizes[r.clone()].iter().sum::<usize>() <= 1000);
    }
}

#[test]
fn fifo_deduplication_ids_fit_and_are_stable() {
    assert_eq!(deduplication_id("a-1"), "a-1");
    let long = "j".repeat(129);
    let h = deduplication_id(&long);
    assert_eq!(h.len(), 64);
    assert_eq!(h, deduplication_id(&long));
    assert_ne!(h, deduplication_id(&"j".repeat(130)));
    assert_eq!(deduplication_id(&"j".repeat(128)), "j".repeat(128));
    // Non-ASCII and spaces are not accepted by SQS in dedup ids: hashed.
    assert_eq!(deduplication_id("café").len(), 64);
    assert_eq!(deduplication_id("a b").len(), 64);
}

fn producer(fifo: bool, max: usize) -> Producer {
    let conf = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .region(aws_sdk_sqs::config::Region::new("us-east-1"))
        .build();
    Producer {
        sqs: aws_sdk_sqs::Client::from_conf(conf),
        queue_url: "q".into(),
        fifo,
        max_message_bytes: max,
    }
}

#[test]
fn refusals_name_the_job_and_the_limit() {
    let p = producer(false, 100);
    let err = p.check(&Job::raw("big-1", "x".repeat(100))).unwrap_err();
    assert!(matches!(&err, SendError::TooLarge { limit: 100, .. }));
    assert!(
        err.to_string().contains("\"big-1\"") && err.to_string().contains("at most 100"),
        "{err}"
    );

    let err = p.check(&Job::raw("", "{}")).unwrap_err();
    assert!(err.to_string().contains("job id is empty"), "{err}");

    let mut job = Job::raw("many", "{}");
    for i in 0..10 {
        let v = MessageAttributeValue::builder()
            .data_type("String")
            .string_value("v")
            .build()
            .unwrap();
        job.attributes.insert(format!("a{i}"), v);
    }
    let err = p.check(&job).unwrap_err();
    assert_eq!(
        err,
        SendError::TooManyAttributes {
            job_id: "many".into(),
            count: 11
        }
    );

    let err = producer(true, 1000)
        .check(&Job::raw("f-1", "{}"))
        .unwrap_err();
    assert!(err.to_string().contains("no message group"), "{err}");
    assert!(
        producer(true, 1000)
            .check(&Job::raw("f-1", "{}").in_group("g"))
            .is_ok()
    );
}

#[test]
fn size_counts_body_and_attributes() {
    let job = Job::raw("id", "12345");
    assert_eq!(job.size(), 5 + JOB_ID_ATTRIBUTE.len() + "String".len() + 2);
}
