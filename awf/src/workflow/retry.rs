//! `retry:` of a `step` or `agent` state: how many times its command (or agent) may run,
//! which failures are worth another attempt, and the wait before each next one (constant,
//! linear or exponential, capped, with optional jitter; for an agent, at least what the
//! model's `Retry-After` asked). The wait is a pure function of the attempt number and a
//! random number the caller draws, so it is tested here without sleeping; the runners
//! (`run_step`, `run_agent`) do the waiting.

use std::time::Duration;

/// The most attempts `max_attempts` may allow.
pub const MAX_ATTEMPTS_LIMIT: u32 = 100;

/// The longest wait a model's `Retry-After` may impose before an agent's next attempt.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(600);

/// A class of agent failure, as the model relay saw it (`on:` of an agent's `retry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryOn {
    /// The model answered HTTP 429.
    RateLimit,
    /// HTTP 529 or 503.
    Overloaded,
    /// Any other 5xx, the relay's own 502 (the endpoint could not be reached) included.
    ServerError,
    /// The state's own `timeout` ended the attempt.
    Timeout,
}

impl RetryOn {
    /// Every name `on:` accepts.
    pub const NAMES: &'static [&'static str] =
        &["rate_limit", "overloaded", "server_error", "timeout"];

    pub fn from_name(name: &str) -> Option<RetryOn> {
        match name {
            "rate_limit" => Some(RetryOn::RateLimit),
            "overloaded" => Some(RetryOn::Overloaded),
            "server_error" => Some(RetryOn::ServerError),
            "timeout" => Some(RetryOn::Timeout),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RetryOn::RateLimit => "rate_limit",
            RetryOn::Overloaded => "overloaded",
            RetryOn::ServerError => "server_error",
            RetryOn::Timeout => "timeout",
        }
    }

    /// The class of a model answer's HTTP status, None for one of no class (a 4xx other
    /// than 429, a success).
    pub fn of_status(status: u16) -> Option<RetryOn> {
        match status {
            429 => Some(RetryOn::RateLimit),
            503 | 529 => Some(RetryOn::Overloaded),
            500..=599 => Some(RetryOn::ServerError),
            _ => None,
        }
    }
}

/// How the wait grows from one attempt to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backoff {
    /// Always `initial_delay`.
    Constant,
    /// `initial_delay × n` after the n-th attempt.
    Linear,
    /// `initial_delay × multiplier^(n−1)` after the n-th attempt.
    #[default]
    Exponential,
}

impl Backoff {
    /// Every name `backoff:` accepts.
    pub const NAMES: &'static [&'static str] = &["constant", "linear", "exponential"];

    pub fn from_name(name: &str) -> Option<Backoff> {
        match name {
            "constant" => Some(Backoff::Constant),
            "linear" => Some(Backoff::Linear),
            "exponential" => Some(Backoff::Exponential),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Backoff::Constant => "constant",
            Backoff::Linear => "linear",
            Backoff::Exponential => "exponential",
        }
    }
}

/// A state's `retry:` block, checked (see the parser): `max_attempts` in
/// 1..=[`MAX_ATTEMPTS_LIMIT`], `initial_delay <= max_delay`, `multiplier > 1`, `jitter` in
/// 0..=1, exit codes in 1..=255, `on` on agent states only.
#[derive(Debug, Clone, PartialEq)]
pub struct Retry {
    /// Attempts in all, the first included (1: no retry).
    pub max_attempts: u32,
    /// The wait before the second attempt.
    pub initial_delay: Duration,
    /// No wait is longer (before jitter).
    pub max_delay: Duration,
    pub backoff: Backoff,
    /// The factor of exponential backoff.
    pub multiplier: f64,
    /// Each wait is multiplied by a random factor in `[1 − jitter, 1 + jitter]`.
    pub jitter: f64,
    /// Only these exit codes are retried; empty: any failure (an exit code other than 0,
    /// a timeout, a kill by a signal) is.
    pub retryable_exit_codes: Vec<i32>,
    /// An agent's: only failures of these classes are retried; empty: any failure (but a
    /// spent budget, an interrupt or a tool proxy error) is.
    pub on: Vec<RetryOn>,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            max_attempts: 1,
            initial_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
            backoff: Backoff::Exponential,
            multiplier: 2.0,
            jitter: 0.0,
            retryable_exit_codes: Vec::new(),
            on: Vec::new(),
        }
    }
}

impl Retry {
    /// The wait before attempt `attempt + 1`, `attempt` being the attempts made so far
    /// (from 1): the backoff's delay, capped at `max_delay`, then scaled by the jitter
    /// factor `1 − jitter + 2 × jitter × random01` (`random01` in 0..=1; 0.5 means none).
    pub fn delay(&self, attempt: u32, random01: f64) -> Duration {
        let n = attempt.max(1);
        let initial = self.initial_delay.as_secs_f64();
        let base = match self.backoff {
            Backoff::Constant => initial,
            Backoff::Linear => initial * f64::from(n),
            // A large power overflows to infinity, which the cap below takes care of.
            Backoff::Exponential => {
                initial
                    * self
                        .multiplier
                        .powi(i32::try_from(n - 1).unwrap_or(i32::MAX))
            }
        };
        let capped = if base.is_finite() {
            base.min(self.max_delay.as_secs_f64())
        } else {
            self.max_delay.as_secs_f64()
        };
        let r = if random01.is_finite() {
            random01.clamp(0.0, 1.0)
        } else {
            0.5
        };
        let jitter = self.jitter.clamp(0.0, 1.0);
        let secs = capped * (1.0 - jitter + 2.0 * jitter * r);
        Duration::from_secs_f64(secs.max(0.0))
    }

    /// Whether a failed attempt may be followed by another, by how it ended: `code` is its
    /// exit code, None for a timeout or a kill by a signal (retried only when no exit code
    /// is listed).
    pub fn retries(&self, code: Option<i32>) -> bool {
        match code {
            _ if self.retryable_exit_codes.is_empty() => true,
            Some(c) => self.retryable_exit_codes.contains(&c),
            None => false,
        }
    }

    /// Whether a failed attempt of an agent may be followed by another: `class` is its
    /// failure's class (None: of no class), `code` the CLI's exit code when it has one.
    /// With `on`, the class must be listed; with `retryable_exit_codes`, an exit code must
    /// be (a failure without one, an `openai_compatible` conversation's, is not held to
    /// the list).
    pub fn retries_agent(&self, class: Option<RetryOn>, code: Option<i32>) -> bool {
        let by_class = self.on.is_empty() || class.is_some_and(|c| self.on.contains(&c));
        let by_code = match code {
            Some(c) => {
                self.retryable_exit_codes.is_empty() || self.retryable_exit_codes.contains(&c)
            }
            None => true,
        };
        by_class && by_code
    }

    /// The wait before an agent's attempt `attempt + 1`: the backoff's [`Retry::delay`],
    /// or the model's `Retry-After` when longer (even above `max_delay`, but at most
    /// [`MAX_RETRY_AFTER`]); true when `Retry-After` decided it.
    pub fn agent_delay(
        &self,
        attempt: u32,
        random01: f64,
        retry_after: Option<Duration>,
    ) -> (Duration, bool) {
        let backoff = self.delay(attempt, random01);
        match retry_after.map(|d| d.min(MAX_RETRY_AFTER)) {
            Some(asked) if asked > backoff => (asked, true),
            _ => (backoff, false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry(backoff: Backoff) -> Retry {
        Retry {
            max_attempts: 10,
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
            backoff,
            ..Retry::default()
        }
    }

    fn ms(d: Duration) -> u128 {
        d.as_millis()
    }

    #[test]
    fn constant_waits_the_initial_delay_each_time() {
        let r = retry(Backoff::Constant);
        for n in 1..=5 {
            assert_eq!(ms(r.delay(n, 0.5)), 100);
        }
    }

    #[test]
    fn linear_grows_by_the_initial_delay_until_the_cap() {
        let r = retry(Backoff::Linear);
        let waits: Vec<u128> = (1..=12).map(|n| ms(r.delay(n, 0.5))).collect();
        assert_eq!(
            waits,
            [
                100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1000, 1000
            ]
        );
    }

    #[test]
    fn exponential_multiplies_until_the_cap() {
        let r = retry(Backoff::Exponential);
        let waits: Vec<u128> = (1..=6).map(|n| ms(r.delay(n, 0.5))).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000]);
        let r = Retry {
            multiplier: 1.5,
            ..retry(Backoff::Exponential)
        };
        assert_eq!(ms(r.delay(3, 0.5)), 225);
    }

    #[test]
    fn huge_attempt_numbers_stay_at_the_cap() {
        let r = Retry {
            multiplier: 1000.0,
            ..retry(Backoff::Exponential)
        };
        assert_eq!(r.delay(100, 0.5), Duration::from_secs(1));
        assert_eq!(r.delay(u32::MAX, 0.5), Duration::from_secs(1));
        assert_eq!(
            retry(Backoff::Linear).delay(u32::MAX, 0.5),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn jitter_scales_the_capped_wait_within_its_bounds() {
        let r = Retry {
            jitter: 0.1,
            ..retry(Backoff::Constant)
        };
        assert_eq!(ms(r.delay(1, 0.0)), 90);
        assert_eq!(ms(r.delay(1, 0.5)), 100);
        assert_eq!(ms(r.delay(1, 1.0)), 110);
        // Applied after the cap: a capped wait varies around max_delay.
        let r = Retry {
            jitter: 0.5,
            ..retry(Backoff::Exponential)
        };
        assert_eq!(ms(r.delay(10, 0.0)), 500);
        assert_eq!(ms(r.delay(10, 1.0)), 1500);
        // Out-of-range randoms are clamped, never a panic.
        assert_eq!(ms(r.delay(1, 7.0)), 150);
        assert_eq!(ms(r.delay(1, f64::NAN)), 100);
        // Full jitter may wait not at all.
        let r = Retry {
            jitter: 1.0,
            ..retry(Backoff::Constant)
        };
        assert_eq!(r.delay(1, 0.0), Duration::ZERO);
    }

    #[test]
    fn without_jitter_the_random_number_does_not_matter() {
        let r = retry(Backoff::Exponential);
        assert_eq!(r.delay(2, 0.0), r.delay(2, 1.0));
    }

    #[test]
    fn which_failures_are_retried() {
        let any = Retry::default();
        assert!(any.retries(Some(1)) && any.retries(Some(75)) && any.retries(None));
        let only = Retry {
            retryable_exit_codes: vec![75, 111],
            ..Retry::default()
        };
        assert!(only.retries(Some(75)) && only.retries(Some(111)));
        assert!(!only.retries(Some(1)));
        // A timeout has no exit code: not one of those listed.
        assert!(!only.retries(None));
    }

    #[test]
    fn which_agent_failures_are_retried() {
        let any = Retry::default();
        assert!(any.retries_agent(None, None) && any.retries_agent(None, Some(1)));
        assert!(any.retries_agent(Some(RetryOn::Timeout), None));
        let only = Retry {
            on: vec![RetryOn::Overloaded, RetryOn::RateLimit],
            ..Retry::default()
        };
        assert!(only.retries_agent(Some(RetryOn::Overloaded), None));
        assert!(only.retries_agent(Some(RetryOn::RateLimit), Some(1)));
        assert!(!only.retries_agent(Some(RetryOn::ServerError), None));
        assert!(!only.retries_agent(None, Some(1)));
        // An exit code must be listed; no exit code is not held to the list.
        let codes = Retry {
            retryable_exit_codes: vec![75],
            ..only.clone()
        };
        assert!(codes.retries_agent(Some(RetryOn::Overloaded), Some(75)));
        assert!(!codes.retries_agent(Some(RetryOn::Overloaded), Some(1)));
        assert!(codes.retries_agent(Some(RetryOn::Overloaded), None));
    }

    #[test]
    fn classes_of_http_statuses() {
        assert_eq!(RetryOn::of_status(429), Some(RetryOn::RateLimit));
        assert_eq!(RetryOn::of_status(529), Some(RetryOn::Overloaded));
        assert_eq!(RetryOn::of_status(503), Some(RetryOn::Overloaded));
        assert_eq!(RetryOn::of_status(502), Some(RetryOn::ServerError));
        assert_eq!(RetryOn::of_status(500), Some(RetryOn::ServerError));
        assert_eq!(RetryOn::of_status(400), None);
        assert_eq!(RetryOn::of_status(200), None);
        for name in RetryOn::NAMES {
            assert_eq!(RetryOn::from_name(name).unwrap().as_str(), *name);
        }
        assert_eq!(RetryOn::from_name("busy"), None);
    }

    #[test]
    fn retry_after_lengthens_a_wait_up_to_ten_minutes() {
        let r = retry(Backoff::Constant);
        // Shorter than the backoff: the backoff's.
        assert_eq!(
            r.agent_delay(1, 0.5, Some(Duration::from_millis(50))),
            (Duration::from_millis(100), false)
        );
        assert_eq!(
            r.agent_delay(1, 0.5, None),
            (Duration::from_millis(100), false)
        );
        // Longer: the model's, even above max_delay (1s here), capped at 10 minutes.
        assert_eq!(
            r.agent_delay(1, 0.5, Some(Duration::from_secs(5))),
            (Duration::from_secs(5), true)
        );
        assert_eq!(
            r.agent_delay(1, 0.5, Some(Duration::from_secs(3600))),
            (MAX_RETRY_AFTER, true)
        );
    }

    #[test]
    fn backoff_names() {
        for name in Backoff::NAMES {
            assert_eq!(Backoff::from_name(name).unwrap().as_str(), *name);
        }
        assert_eq!(Backoff::from_name("fibonacci"), None);
    }
}
