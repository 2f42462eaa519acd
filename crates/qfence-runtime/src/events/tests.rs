//! The chain, its stores and its verification.

use super::*;
use serde_json::json;

fn chain(n: u64) -> Vec<Event> {
    let mut log = EventLog::open(MemoryStore::default()).unwrap();
    for i in 0..n {
        let kind = [EventKind::Decision, EventKind::Command, EventKind::Operator][i as usize % 3];
        log.append(
            NewEvent::new(kind, "dc1-a", format!("step {i}"))
                .plan("erp-db")
                .site(if i % 2 == 0 { "dc1" } else { "dc2" })
                .term(3)
                .generation(7 + i)
                .data(json!({"z": i, "a": [1, "two", null], "n": {"y": true, "b": 1.5}})),
            1_700_000_000_000 + i,
        )
        .unwrap();
    }
    log.all().to_vec()
}

fn records(v: &[Event]) -> Vec<Record> {
    v.iter()
        .map(|e| Record::Event(Box::new(e.clone())))
        .collect()
}

fn check(v: &[Event]) -> Result<Verified, BrokenLink> {
    verify(&records(v), &VerifyOptions::default())
}

#[test]
fn an_intact_chain_verifies_and_reports_its_head() {
    let v = chain(5);
    let ok = check(&v).unwrap();
    assert_eq!((ok.count, ok.first_seq, ok.last_seq), (5, 1, 5));
    assert_eq!(ok.head, v[4].hash);
    assert_eq!(v[0].prev, GENESIS);
    assert_eq!(v[3].prev, v[2].hash);
}

#[test]
fn the_canonical_encoding_is_pinned() {
    // If this changes, every existing log stops verifying: bump DOMAIN instead.
    let e = NewEvent::new(EventKind::Operator, "token:alice", "Paused \"erp-db\"\n")
        .plan("erp-db")
        .data(json!({"b": 1, "a": [true, null, -2, 0.5], "é": "\u{1}"}))
        .seal(None, 1_700_000_000_000);
    let text = String::from_utf8(canonical_bytes(&e)).unwrap();
    assert_eq!(
        text,
        "qfence-event-v1\n{\"actor\":\"token:alice\",\"data\":{\"a\":[true,null,-2,0.5],\"b\":1,\"é\":\"\\u0001\"},\"generation\":null,\"kind\":\"operator\",\"message\":\"Paused \\\"erp-db\\\"\\n\",\"plan\":\"erp-db\",\"prev\":\"0000000000000000000000000000000000000000000000000000000000000000\",\"seq\":1,\"site\":null,\"term\":null,\"time_ms\":1700000000000}"
    );
    assert_eq!(e.hash.len(), 64);
}

#[test]
fn tampering_with_any_field_is_a_hash_mismatch_at_that_record() {
    let base = chain(4);
    type Tamper = Box<dyn Fn(&mut Event)>;
    let tamperings: Vec<(&str, Tamper)> = vec![
        ("seq", Box::new(|e| e.seq += 10)),
        ("time_ms", Box::new(|e| e.time_ms += 1)),
        ("kind", Box::new(|e| e.kind = EventKind::Alarm)),
        ("plan", Box::new(|e| e.plan = Some("web".into()))),
        ("plan none", Box::new(|e| e.plan = None)),
        ("site", Box::new(|e| e.site = Some("dc9".into()))),
        ("term", Box::new(|e| e.term = Some(4))),
        ("generation", Box::new(|e| e.generation = None)),
        ("actor", Box::new(|e| e.actor = "mallory".into())),
        ("message", Box::new(|e| e.message.push('!'))),
        ("data", Box::new(|e| e.data["z"] = json!(99))),
        ("nested data", Box::new(|e| e.data["n"]["y"] = json!(false))),
        ("prev", Box::new(|e| e.prev = GENESIS.into())),
        ("hash", Box::new(|e| e.hash = GENESIS.into())),
    ];
    for (what, tamper) in tamperings {
        let mut v = base.clone();
        tamper(&mut v[2]);
        let err = check(&v).expect_err(what);
        assert_eq!(err.position, 3, "{what}: {err}");
        assert!(
            matches!(err.reason, Break::HashMismatch { .. }),
            "{what}: {err}"
        );
    }
}

#[test]
fn a_changed_record_whose_hash_was_recomputed_breaks_the_next_link() {
    let mut v = chain(4);
    v[1].message = "rewritten".into();
    v[1].hash = hash_of(&v[1]);
    let err = check(&v).unwrap_err();
    assert_eq!(err.seq, Some(3));
    assert!(matches!(err.reason, Break::PrevMismatch { .. }), "{err}");
}

#[test]
fn a_deleted_record_is_a_seq_gap() {
    let mut v = chain(5);
    v.remove(2);
    let err = check(&v).unwrap_err();
    assert_eq!(err.seq, Some(4));
    assert_eq!(
        err.reason,
        Break::SeqGap {
            expected: 3,
            found: 4
        }
    );
}

#[test]
fn swapped_records_are_reported_as_reordered() {
    let mut v = chain(5);
    v.swap(1, 2);
    let err = check(&v).unwrap_err();
    assert_eq!(
        err.reason,
        Break::Reordered {
            previous: 1,
            found: 3
        }
    );
    let mut v = chain(5);
    v.swap(3, 4);
    let err = check(&v).unwrap_err();
    assert_eq!(
        err.reason,
        Break::Reordered {
            previous: 3,
            found: 5
        }
    );
}

#[test]
fn deleting_the_first_record_is_a_bad_start_unless_partial_is_allowed() {
    let mut v = chain(3);
    v.remove(0);
    assert_eq!(check(&v).unwrap_err().reason, Break::BadStart { found: 2 });
    let opts = VerifyOptions {
        allow_partial: true,
        ..Default::default()
    };
    assert_eq!(verify(&records(&v), &opts).unwrap().first_seq, 2);
}

#[test]
fn records_cut_off_the_end_are_caught_only_with_the_expected_head() {
    let full = chain(4);
    let head = full[3].hash.clone();
    let cut = &full[..3];
    assert!(check(cut).is_ok());
    let opts = VerifyOptions {
        expect_head: Some(head),
        ..Default::default()
    };
    assert!(matches!(
        verify(&records(cut), &opts).unwrap_err().reason,
        Break::HeadMismatch { .. }
    ));
    assert!(verify(&records(&full), &opts).is_ok());
}

#[test]
fn a_file_cut_in_the_middle_of_a_record_is_malformed_at_that_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let mut log = EventLog::open(JsonlStore::open(&path).unwrap()).unwrap();
    for i in 0..4 {
        log.append(
            NewEvent::new(EventKind::Decision, "dc1-a", format!("d{i}")),
            i,
        )
        .unwrap();
    }
    drop(log);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(verify(&read_jsonl(&path).unwrap(), &VerifyOptions::default()).is_ok());
    let lines: Vec<&str> = text.lines().collect();
    let cut = format!(
        "{}\n{}\n{}\n{}\n",
        lines[0],
        &lines[1][..lines[1].len() / 2],
        lines[2],
        lines[3]
    );
    std::fs::write(&path, cut).unwrap();
    let err = verify(&read_jsonl(&path).unwrap(), &VerifyOptions::default()).unwrap_err();
    assert_eq!(err.position, 2);
    assert!(matches!(err.reason, Break::Malformed { .. }), "{err}");
    // And a broken log is not opened for appending.
    assert!(matches!(
        EventLog::open(JsonlStore::open(&path).unwrap()),
        Err(EventLogError::Broken { .. })
    ));
}

#[test]
fn a_torn_last_record_is_cut_off_and_the_log_reopens_but_a_torn_middle_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let mut log = EventLog::open(JsonlStore::open(&path).unwrap()).unwrap();
    for i in 0..3 {
        log.append(NewEvent::new(EventKind::Decision, "a", format!("d{i}")), i)
            .unwrap();
    }
    drop(log);
    let whole = std::fs::read(&path).unwrap();
    assert_eq!(repair_torn_tail(&path).unwrap(), None);
    // A crash in the middle of the fourth append.
    let mut torn = whole.clone();
    torn.extend_from_slice(b"{\"seq\":4,\"time_ms\":3,\"ki");
    std::fs::write(&path, &torn).unwrap();
    assert!(EventLog::open(JsonlStore::open(&path).unwrap()).is_err());
    assert_eq!(
        repair_torn_tail(&path).unwrap(),
        Some(TornTail { bytes: 24 })
    );
    assert_eq!(std::fs::read(&path).unwrap(), whole);
    let mut log = EventLog::open(JsonlStore::open(&path).unwrap()).unwrap();
    assert_eq!(
        log.append(NewEvent::new(EventKind::Alarm, "a", "torn"), 4)
            .unwrap()
            .seq,
        4
    );
    drop(log);

    // A whole last record without its line feed is kept.
    let text = std::fs::read(&path).unwrap();
    std::fs::write(&path, &text[..text.len() - 1]).unwrap();
    assert_eq!(repair_torn_tail(&path).unwrap(), None);
    assert_eq!(std::fs::read(&path).unwrap(), text);

    // A cut record in the middle is not a torn tail.
    let lines: Vec<&[u8]> = text.split(|b| *b == b'\n').collect();
    let mut mid = Vec::new();
    mid.extend_from_slice(&lines[0][..10]);
    mid.push(b'\n');
    for l in &lines[1..] {
        mid.extend_from_slice(l);
        mid.push(b'\n');
    }
    mid.pop();
    std::fs::write(&path, &mid).unwrap();
    assert_eq!(repair_torn_tail(&path).unwrap(), None);
    assert!(EventLog::open(JsonlStore::open(&path).unwrap()).is_err());
}

#[test]
fn a_reopened_file_log_continues_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let mut log = EventLog::open(JsonlStore::open(&path).unwrap()).unwrap();
    log.append(NewEvent::new(EventKind::Decision, "a", "one"), 1)
        .unwrap();
    drop(log);
    let mut log = EventLog::open(JsonlStore::open(&path).unwrap()).unwrap();
    let e = log
        .append(NewEvent::new(EventKind::Decision, "a", "two"), 2)
        .unwrap();
    assert_eq!(e.seq, 2);
    let ok = verify(&read_jsonl(&path).unwrap(), &VerifyOptions::default()).unwrap();
    assert_eq!(ok.last_seq, 2);
}

#[test]
fn queries_page_by_seq_and_filter() {
    let mut log = EventLog::open(MemoryStore::default()).unwrap();
    for e in chain(10) {
        log.events.push(e);
    }
    let page = log.query(&EventQuery {
        limit: Some(3),
        ..Default::default()
    });
    assert_eq!(
        page.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(page.next_after, Some(3));
    let page = log.query(&EventQuery {
        after: Some(3),
        kind: Some(EventKind::Decision),
        ..Default::default()
    });
    // Decisions are seq 1, 4, 7, 10.
    assert_eq!(
        page.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [4, 7, 10]
    );
    assert_eq!(page.next_after, None);
    let page = log.query(&EventQuery {
        site: Some("dc2".into()),
        limit: Some(2),
        ..Default::default()
    });
    assert_eq!(
        page.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [2, 4]
    );
    assert_eq!(page.next_after, Some(4));
    assert_eq!(page.head_seq, 10);
}
