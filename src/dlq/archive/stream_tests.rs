//! Unit tests of the lines themselves: read one at a time within a bound,
//! the job id an import stamps, an export whole only with every letter,
//! and a bad line refused without its content quoted.

use super::*;

fn all(input: &[u8], max: usize) -> Vec<(usize, Line)> {
    let mut lines = Lines::new(std::io::BufReader::with_capacity(4, input), max);
    let mut out = Vec::new();
    while let Some(l) = lines.next_line().unwrap() {
        out.push(l);
    }
    assert_eq!(lines.bytes_read(), input.len() as u64);
    out
}

#[test]
fn lines_are_read_one_at_a_time_within_a_bound() {
    let got = all(b"ab\r\n\ntoo long line\nxyz", 8);
    assert_eq!(
        got,
        vec![
            (1, Line::Text("ab".into())),
            (2, Line::Text(String::new())),
            (3, Line::TooLong),
            (4, Line::Text("xyz".into())),
        ]
    );
    assert_eq!(all(b"\xff\xfe\n", 8), vec![(1, Line::NotUtf8)]);
    assert!(all(b"", 8).is_empty());
}

/// An import stamps the id the consumer resolved: the body pointer's
/// value, else the exported (DLQ) MessageId.
#[test]
fn an_import_stamps_the_resolved_job_id() {
    let line = |body: &str| Archived {
        message_id: "m-dlq".into(),
        body: body.into(),
        attributes: HashMap::new(),
        group_id: None,
        deduplication_id: None,
        source_arn: None,
        context: None,
        first_enqueued: None,
    };
    let r = JobIdResolver::new().with_body_pointer("/ref");
    assert_eq!(line(r#"{"ref":"p-1"}"#).to_job(&r).unwrap().id, "p-1");
    assert_eq!(line(r#"{"x":1}"#).to_job(&r).unwrap().id, "m-dlq");
    let err = line(r#"{"ref":[1]}"#).to_job(&r).unwrap_err();
    assert!(err.contains("no valid job id"), "{err}");
}

/// Only a file with a line for every letter read may stand for the
/// DLQ: one missing (or unreadable) line and nothing is deleted.
#[test]
fn an_export_is_whole_only_with_every_letter() {
    let letter = |id: &str| {
        let m = DeadMessage {
            message_id: id.into(),
            receipt_handle: "rh".into(),
            body: "{}".into(),
            attributes: HashMap::new(),
            system: HashMap::new(),
        };
        let c = Context::of(&m, None, None);
        (m, c)
    };
    let items = vec![letter("m-1"), letter("m-2")];
    let lines = export_lines(&items, vec![None, None]).unwrap();
    assert_eq!(lines.len(), 2);
    assert!(written_whole(&lines.join("\n"), &items));
    assert!(!written_whole(&lines[0], &items), "a line short");
    let garbled = format!("{}\n{}", lines[0], &lines[1][..lines[1].len() - 1]);
    assert!(!written_whole(&garbled, &items), "a line cut short");
}

#[test]
fn a_bad_line_is_not_quoted() {
    // serde_json would say: invalid type: integer `31415926`, expected a string
    let err = parse_line(r#"{"message_id": "m", "body": 31415926}"#)
        .unwrap()
        .unwrap_err();
    assert!(!err.contains("31415926"), "{err}");
    assert!(err.contains("not an exported dead letter"), "{err}");
}
