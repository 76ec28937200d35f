//! Rate limits (429), an unavailable hub (503) and refused connections: retried with the
//! hub's `Retry-After` or a back-off, within the policy's bounds; other errors at once.
//! No test sleeps: the policy records its waits instead.

use std::time::{Duration, UNIX_EPOCH};

use repgeom_hub::test_server::TestHub;
use repgeom_hub::{Error, Files, Hub, HubConfig};

use crate::{Recorder, Setup, snapshot, tiny_repo};

/// Sun, 06 Nov 1994 08:49:37 GMT: the clock of every policy here (for `Retry-After` dates).
const NOW: u64 = 784_111_777;

/// One refusal rule on the test hub, then a snapshot of `file` at `step1`.
struct Case {
    /// `TestHub::fail_first`'s pattern, count, status and `Retry-After`.
    pattern: &'static str,
    times: usize,
    status: u16,
    retry_after: Option<&'static str>,
    /// The file to fetch (a large one goes through `/cdn/`); with `drop_at`, its first
    /// download breaks off after that many bytes and is resumed with a range.
    file: &'static str,
    drop_at: Option<usize>,
    /// `max_total_wait` in seconds, if not the default.
    max_wait: Option<u64>,
}

const fn case(
    pattern: &'static str,
    times: usize,
    status: u16,
    retry_after: Option<&'static str>,
) -> Case {
    Case {
        pattern,
        times,
        status,
        retry_after,
        file: "config.json",
        drop_at: None,
        max_wait: None,
    }
}

/// Runs `c`; checks the waits the policy asked for, how many requests the rule refused, and
/// the outcome (`"ok"`, or the error message with the endpoint and hashes replaced).
fn check(c: Case, waits: &[u64], refused: usize, want: &str) {
    let s = Setup::new(vec![tiny_repo()]);
    if let Some(at) = c.drop_at {
        s.hub.drop_after(c.file, at, 1);
    }
    s.hub
        .fail_first(c.pattern, c.times, c.status, c.retry_after);
    let mut policy = s
        .retries
        .policy()
        .with_clock(|| UNIX_EPOCH + Duration::from_secs(NOW));
    if let Some(m) = c.max_wait {
        policy.max_total_wait = Duration::from_secs(m);
    }
    let hub = Hub::new(HubConfig {
        retry: policy,
        ..s.config()
    });
    let (res, _) = snapshot(&hub, "step1", &Files::Only(vec![c.file.into()]));
    let got = match &res {
        Ok(snap) => {
            let want = std::fs::read(
                crate::root()
                    .join("fixtures/extract/gptneox_parallel")
                    .join(c.file),
            )
            .unwrap();
            assert_eq!(std::fs::read(snap.dir.join(c.file)).unwrap(), want);
            "ok".to_string()
        }
        Err(e) => crate::redact(&e.to_string().replace(s.hub.endpoint(), "<endpoint>")),
    };
    let ctx = format!("{} ×{} {}", c.pattern, c.times, c.status);
    assert_eq!(got, want, "{ctx}");
    assert_eq!(s.retries.waits(), waits, "{ctx}");
    // One note per wait, and the refusals the hub sent are the attempts that failed.
    assert_eq!(s.retries.notes().len(), waits.len(), "{ctx}");
    assert_eq!(s.hub.refused(), refused, "{ctx}");
}

#[test]
fn rate_limits_and_unavailable_hubs_are_waited_out() {
    // A file download that succeeds after two 429s with `Retry-After: 1`.
    check(case("/resolve/", 2, 429, Some("1")), &[1, 1], 2, "ok");
    // Retry-After as an HTTP date, seven seconds after the clock.
    let date = Some("Sun, 06 Nov 1994 08:49:44 GMT");
    check(case("/resolve/", 1, 429, date), &[7], 1, "ok");
    // A date already past: ask again at once.
    let past = Some("Sun, 06 Nov 1994 08:00:00 GMT");
    check(case("/resolve/", 1, 429, past), &[0], 1, "ok");
    // 503 without Retry-After: exponential back-off from one second.
    check(case("/api/", 3, 503, None), &[1, 2, 4], 3, "ok");
    // Retry-After beyond the per-wait cap (60 s) waits the cap.
    check(case("/api/", 1, 429, Some("3600")), &[60], 1, "ok");
    // A large file's content (the CDN), and a resumed range request, are retried too.
    let big = "model-00001-of-00002.safetensors";
    check(
        Case {
            file: big,
            ..case("GET /cdn/", 2, 429, Some("2"))
        },
        &[2, 2],
        2,
        "ok",
    );
    check(
        Case {
            file: big,
            drop_at: Some(40_000),
            ..case("range=bytes=40000-", 2, 503, None)
        },
        &[1, 2],
        2,
        "ok",
    );
}

#[test]
fn other_errors_are_not_retried_and_read_as_before() {
    // A 404 for the file: one attempt, the message it always had.
    check(
        case("/resolve/", 1, 404, None),
        &[],
        1,
        "test-org/tiny-neox@step1: no file `config.json` in this revision",
    );
    // 401 and 403 likewise.
    check(
        case("/resolve/", 1, 403, Some("1")),
        &[],
        1,
        "test-org/tiny-neox@step1: access refused (HTTP 403); this model is gated: accept its \
         licence on the hub page and set HF_TOKEN",
    );
    // An unknown model: one request, no wait.
    let s = Setup::new(vec![tiny_repo()]);
    let err = s.client().resolve("test-org/nope", "main").unwrap_err();
    assert_eq!(
        err.to_string().replace(s.hub.endpoint(), "<endpoint>"),
        "test-org/nope: no such model on <endpoint> (if it is gated or private, set HF_TOKEN)"
    );
    assert_eq!(s.take_requests().len(), 1);
    assert!(s.retries.waits().is_empty());
}

#[test]
fn exhausted_retries_say_how_many_over_how_long_and_the_last_answer() {
    // Ten attempts (the default), nine waits of the hub's Retry-After.
    check(
        case("/api/", 100, 429, Some("1")),
        &[1; 9],
        10,
        "test-org/tiny-neox: the commit of `step1`: gave up after 10 attempts and 9.0s of \
         waiting; last: HTTP 429 Too Many Requests \
         (<endpoint>/api/models/test-org/tiny-neox/revision/step1); the hub is rate-limiting \
         or unavailable: try again later, or let a request wait longer than 300s with \
         REPGEOM_HUB_MAX_RETRY_WAIT",
    );
    // The total wait is bounded: with 5 s, two waits of 2 s, then a third would pass it.
    check(
        Case {
            max_wait: Some(5),
            ..case("/resolve/", 100, 503, Some("2"))
        },
        &[2, 2],
        3,
        "test-org/tiny-neox@step1: config.json: gave up after 3 attempts and 4.0s of waiting; \
         last: HTTP 503 Service Unavailable \
         (<endpoint>/test-org/tiny-neox/resolve/<sha40>/config.json); the hub is \
         rate-limiting or unavailable: try again later, or let a request wait longer than 5s \
         with REPGEOM_HUB_MAX_RETRY_WAIT",
    );
    // A waiting limit of 0 turns retrying off.
    check(
        Case {
            max_wait: Some(0),
            ..case("/api/", 1, 503, None)
        },
        &[],
        1,
        "test-org/tiny-neox: the commit of `step1`: gave up after 1 attempts and 0.0s of \
         waiting; last: HTTP 503 Service Unavailable \
         (<endpoint>/api/models/test-org/tiny-neox/revision/step1); the hub is rate-limiting \
         or unavailable: try again later, or let a request wait longer than 0s with \
         REPGEOM_HUB_MAX_RETRY_WAIT",
    );
}

#[test]
fn a_refused_connection_is_retried_then_fails() {
    // A hub that has stopped: its port refuses connections.
    let endpoint = {
        let hub = TestHub::start(vec![tiny_repo()]);
        hub.endpoint().to_string()
    };
    let rec = Recorder::default();
    let cache = tempfile::tempdir().unwrap();
    let hub = Hub::new(HubConfig {
        endpoint: endpoint.clone(),
        cache: cache.path().to_path_buf(),
        token: None,
        offline: false,
        refresh: false,
        attempts: 3,
        retry: rec.policy(),
    });
    let err = hub.resolve("test-org/tiny-neox", "main").unwrap_err();
    let Error::RetriesExhausted { attempts, last, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(*attempts, 10);
    assert!(last.to_lowercase().contains("refused"), "{last}");
    // Back-off from one second, doubling, capped at 60 s: 243 s of the 300 s allowed.
    assert_eq!(rec.waits(), [1, 2, 4, 8, 16, 32, 60, 60, 60]);
    let notes = rec.notes();
    assert_eq!(notes.len(), 9);
    assert!(
        notes[0].starts_with("hub: test-org/tiny-neox: the commit of `main`: ")
            && notes[0].ends_with("; waiting 1s, then attempt 2 of 10"),
        "{notes:?}"
    );
    assert!(notes[8].ends_with("; waiting 60s, then attempt 10 of 10"));
}

#[test]
fn each_retry_is_one_note_naming_what_status_wait_and_attempt() {
    let s = Setup::new(vec![tiny_repo()]);
    s.hub.fail_first("/resolve/", 2, 429, Some("1"));
    s.hub.fail_first("/api/", 1, 503, None);
    snapshot(
        &s.client(),
        "step1",
        &Files::Only(vec!["config.json".into()]),
    )
    .0
    .unwrap();
    assert_eq!(
        s.retries.notes(),
        [
            "hub: test-org/tiny-neox: the commit of `step1`: HTTP 503 Service Unavailable; \
             waiting 1s, then attempt 2 of 10",
            "hub: test-org/tiny-neox@step1: config.json: HTTP 429 Too Many Requests; waiting \
             1s (Retry-After), then attempt 2 of 10",
            "hub: test-org/tiny-neox@step1: config.json: HTTP 429 Too Many Requests; waiting \
             1s (Retry-After), then attempt 3 of 10",
        ]
    );
}
