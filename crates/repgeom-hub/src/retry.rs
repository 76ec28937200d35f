//! When and how long the hub client waits before asking again: rate limits (`429`), an
//! unavailable hub (`503`), refused or timed-out connections.
//!
//! The rules follow `huggingface_hub`'s `http_backoff` (retry on connection errors and
//! timeouts, exponential back-off from one second) and RFC 9110 § 10.2.3 (`Retry-After` as
//! delay-seconds or an HTTP date), with the total wait bounded per request so that a hub that
//! keeps refusing ends in an error that says so.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::{Error, Result};

/// The environment variable with the most seconds one request may spend waiting between
/// retries ([`RetryPolicy::max_total_wait`]; default 300).
pub const MAX_RETRY_WAIT_VAR: &str = "REPGEOM_HUB_MAX_RETRY_WAIT";

type SleepFn = Arc<dyn Fn(Duration) + Send + Sync>;
type ClockFn = Arc<dyn Fn() -> SystemTime + Send + Sync>;
type NoteFn = Arc<dyn Fn(&str) + Send + Sync>;

/// How the hub client retries a request that met a rate limit (`429`), an unavailable hub
/// (`503`), a refused connection or a timeout. Every request is covered: API calls, the
/// `HEAD` that resolves a file, and file downloads including resumed ranges. Any other status
/// is answered at once as before.
///
/// Before attempt `n + 1` the client waits the hub's `Retry-After` (seconds or an HTTP date)
/// if it gave one, else `base_delay × 2^(n-1)`; either is capped at `max_delay`. It gives up,
/// with [`Error::RetriesExhausted`], after `max_attempts` attempts or when the next wait would
/// take the request's total wait past `max_total_wait`. Each retry is one line to the notes
/// sink (stderr by default), e.g. `hub: org/name@main: config.json: HTTP 429 Too Many
/// Requests; waiting 2s (Retry-After), then attempt 2 of 10`.
///
/// Defaults: 10 attempts, 1 s base, 60 s per wait, 300 s in all per request
/// ([`MAX_RETRY_WAIT_VAR`] changes the last). The sleep, the clock (for `Retry-After` dates)
/// and the notes sink are replaceable, so tests need not wait.
///
/// ```
/// use std::time::Duration;
/// use repgeom_hub::RetryPolicy;
/// let p = RetryPolicy::default();
/// assert_eq!(p.max_total_wait, Duration::from_secs(300));
/// // Exponential back-off without Retry-After, capped at max_delay.
/// assert_eq!(p.delay(1, None), Duration::from_secs(1));
/// assert_eq!(p.delay(3, None), Duration::from_secs(4));
/// assert_eq!(p.delay(9, None), Duration::from_secs(60));
/// assert_eq!(p.delay(1, Some(Duration::from_secs(7))), Duration::from_secs(7));
/// ```
#[derive(Clone)]
pub struct RetryPolicy {
    /// Attempts per request, the first included (at least 1).
    pub max_attempts: u32,
    /// The first back-off wait when the hub gives no `Retry-After`; it doubles per attempt.
    pub base_delay: Duration,
    /// The longest single wait, `Retry-After` included.
    pub max_delay: Duration,
    /// The most one request waits in all before giving up ([`MAX_RETRY_WAIT_VAR`]).
    pub max_total_wait: Duration,
    sleep: SleepFn,
    clock: ClockFn,
    note: NoteFn,
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("max_attempts", &self.max_attempts)
            .field("base_delay", &self.base_delay)
            .field("max_delay", &self.max_delay)
            .field("max_total_wait", &self.max_total_wait)
            .finish_non_exhaustive()
    }
}

#[allow(clippy::print_stderr)] // the hub client's one channel for retry notes
fn note_to_stderr(line: &str) {
    eprintln!("{line}");
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 10,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
            max_total_wait: Duration::from_secs(300),
            sleep: Arc::new(std::thread::sleep),
            clock: Arc::new(SystemTime::now),
            note: Arc::new(note_to_stderr),
        }
    }
}

impl RetryPolicy {
    /// The defaults with `max_total_wait` from [`MAX_RETRY_WAIT_VAR`] (whole or fractional
    /// seconds; `0` turns retrying off). A value that is not a number is a note on stderr and
    /// the default is kept; [`RetryPolicy::from_vars`] makes it an error instead.
    pub fn from_env() -> Self {
        Self::from_vars(|k| std::env::var(k).ok()).unwrap_or_else(|e| {
            let p = RetryPolicy::default();
            (p.note)(&format!("hub: {e}; using {}s", p.max_total_wait.as_secs()));
            p
        })
    }

    /// The defaults with `max_total_wait` from [`MAX_RETRY_WAIT_VAR`] as `get` reports it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use repgeom_hub::RetryPolicy;
    /// let p = RetryPolicy::from_vars(|_| Some("12.5".into())).unwrap();
    /// assert_eq!(p.max_total_wait, Duration::from_millis(12_500));
    /// assert!(RetryPolicy::from_vars(|_| Some("soon".into())).is_err());
    /// ```
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut p = RetryPolicy::default();
        if let Some(v) = get(MAX_RETRY_WAIT_VAR).filter(|v| !v.trim().is_empty()) {
            let secs: f64 = v
                .trim()
                .parse()
                .ok()
                .filter(|s: &f64| s.is_finite() && *s >= 0.0)
                .ok_or_else(|| Error::BadEnv {
                    var: MAX_RETRY_WAIT_VAR.into(),
                    value: v.clone(),
                    expected: "a number of seconds (0 or more)".into(),
                })?;
            p.max_total_wait = Duration::from_secs_f64(secs);
        }
        Ok(p)
    }

    /// This policy with `sleep` in place of [`std::thread::sleep`] (tests record the waits).
    pub fn with_sleep(mut self, sleep: impl Fn(Duration) + Send + Sync + 'static) -> Self {
        self.sleep = Arc::new(sleep);
        self
    }

    /// This policy with `clock` in place of [`SystemTime::now`] (for `Retry-After` dates).
    pub fn with_clock(mut self, clock: impl Fn() -> SystemTime + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// This policy with its retry notes (one line each, no newline) sent to `note` instead of
    /// stderr.
    pub fn with_notes(mut self, note: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.note = Arc::new(note);
        self
    }

    /// The wait after failed attempt `attempt` (1-based): `retry_after` if the hub gave one,
    /// else `base_delay × 2^(attempt-1)`; at most `max_delay`.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let backoff = || {
            let factor = 1u32 << attempt.saturating_sub(1).min(20);
            self.base_delay.saturating_mul(factor)
        };
        retry_after.unwrap_or_else(backoff).min(self.max_delay)
    }

    /// The wait a `Retry-After` value asks for, as of now on this policy's clock.
    pub fn retry_after(&self, value: &str) -> Option<Duration> {
        parse_retry_after(value, (self.clock)())
    }

    /// Runs `attempt` until it succeeds, fails for good, or the policy's bounds are reached.
    /// `what` names the request in notes and errors, `url` is the request.
    pub(crate) fn run<T>(
        &self,
        what: &str,
        url: &str,
        mut attempt: impl FnMut() -> Attempt<T>,
    ) -> Result<T> {
        let max = self.max_attempts.max(1);
        let mut waited = Duration::ZERO;
        let mut n = 1;
        loop {
            let (last, retry_after) = match attempt() {
                Attempt::Done(r) => return r,
                Attempt::Retry { last, retry_after } => (last, retry_after),
            };
            let wait = self.delay(n, retry_after);
            if n >= max || waited + wait > self.max_total_wait {
                return Err(Error::RetriesExhausted {
                    what: what.into(),
                    url: url.into(),
                    attempts: n,
                    waited_s: waited.as_secs_f64(),
                    max_wait_s: self.max_total_wait.as_secs_f64(),
                    last,
                });
            }
            (self.note)(&format!(
                "hub: {what}: {last}; waiting {}{}, then attempt {} of {max}",
                show(wait),
                if retry_after.is_some() {
                    " (Retry-After)"
                } else {
                    ""
                },
                n + 1
            ));
            (self.sleep)(wait);
            waited += wait;
            n += 1;
        }
    }
}

/// What one attempt of a request came to.
pub(crate) enum Attempt<T> {
    /// Finished: the answer, or an error not worth retrying.
    Done(Result<T>),
    /// Worth another try: what went wrong, and the hub's `Retry-After` if it gave one.
    Retry {
        last: String,
        retry_after: Option<Duration>,
    },
}

/// `1s`, `1.5s`, `250ms`.
fn show(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// A `Retry-After` value (RFC 9110 § 10.2.3) as a wait from `now`: delay-seconds (`120`) or
/// an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`; a date already past is no wait). The
/// obsolete RFC 850 and asctime date forms are not read (the hub does not send them): `None`,
/// and the client falls back to its back-off.
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        return v.parse().ok().map(Duration::from_secs);
    }
    let at = parse_imf_fixdate(v)?;
    let now = now.duration_since(UNIX_EPOCH).ok()?.as_secs();
    Some(Duration::from_secs(at.saturating_sub(now)))
}

/// Seconds since the Unix epoch of an IMF-fixdate (RFC 9110 § 5.6.7):
/// `Sun, 06 Nov 1994 08:49:37 GMT`.
pub(crate) fn parse_imf_fixdate(s: &str) -> Option<u64> {
    const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (day_name, rest) = s.split_once(", ")?;
    if !DAYS.contains(&day_name) {
        return None;
    }
    let parts: Vec<&str> = rest.split(' ').collect();
    let [day, month, year, time, "GMT"] = parts.as_slice() else {
        return None;
    };
    let num = |t: &str, len: usize| -> Option<u64> {
        (t.len() == len && t.bytes().all(|b| b.is_ascii_digit())).then(|| t.parse().ok())?
    };
    let day = num(day, 2)?;
    let month = MONTHS.iter().position(|m| m == month)? as u64 + 1;
    let year = num(year, 4)?;
    let hms: Vec<&str> = time.split(':').collect();
    let [h, m, sec] = hms.as_slice() else {
        return None;
    };
    let (h, m, sec) = (num(h, 2)?, num(m, 2)?, num(sec, 2)?);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let month_len = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if year < 1970
        || day == 0
        || day > month_len[month as usize - 1]
        || h > 23
        || m > 59
        || sec > 60
    {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + h * 3600 + m * 60 + sec)
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's `days_from_civil`),
/// for years from 1970.
fn days_from_civil(y: u64, m: u64, d: u64) -> u64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(value: &str, now: u64, want: Option<u64>) {
        let now = UNIX_EPOCH + Duration::from_secs(now);
        assert_eq!(
            parse_retry_after(value, now),
            want.map(Duration::from_secs),
            "Retry-After: {value:?}"
        );
    }

    #[test]
    fn retry_after_as_seconds_or_date() {
        // 784111777 is Sun, 06 Nov 1994 08:49:37 GMT (RFC 9110's example).
        let t = 784_111_777;
        check("120", t, Some(120));
        check(" 0 ", t, Some(0));
        check("Sun, 06 Nov 1994 08:49:37 GMT", t, Some(0));
        check("Sun, 06 Nov 1994 08:49:37 GMT", t - 5, Some(5));
        check("Sun, 06 Nov 1994 08:49:37 GMT", t + 100, Some(0));
        check("Thu, 01 Jan 1970 00:00:00 GMT", 0, Some(0));
        check("Tue, 29 Feb 2000 23:59:59 GMT", 951_868_790, Some(9));
        check("Wed, 01 Jan 2031 00:00:00 GMT", 1_924_991_990, Some(10));
        // Not read: RFC 850 and asctime forms, garbage, negative or fractional seconds.
        check("Sunday, 06-Nov-94 08:49:37 GMT", t, None);
        check("Sun Nov  6 08:49:37 1994", t, None);
        check("Sun, 30 Feb 1994 08:49:37 GMT", t, None);
        check("Sun, 06 Nov 1994 08:49:37 UTC", t, None);
        check("soon", t, None);
        check("-1", t, None);
        check("1.5", t, None);
        check("", t, None);
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let p = RetryPolicy::default();
        let got: Vec<u64> = (1..=8).map(|n| p.delay(n, None).as_secs()).collect();
        assert_eq!(got, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(p.delay(1, Some(Duration::from_secs(3600))).as_secs(), 60);
        assert_eq!(p.delay(u32::MAX, None).as_secs(), 60);
    }

    #[test]
    fn env_values() {
        let check = |v: Option<&str>, want: Option<u64>| {
            let got = RetryPolicy::from_vars(|k| {
                assert_eq!(k, MAX_RETRY_WAIT_VAR);
                v.map(str::to_string)
            })
            .ok()
            .map(|p| p.max_total_wait.as_millis() as u64);
            assert_eq!(got, want, "{v:?}");
        };
        check(None, Some(300_000));
        check(Some(""), Some(300_000));
        check(Some("0"), Some(0));
        check(Some("42"), Some(42_000));
        check(Some(" 0.25 "), Some(250));
        check(Some("-3"), None);
        check(Some("inf"), None);
        check(Some("five minutes"), None);
    }
}
