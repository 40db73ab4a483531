//! What the retry loops of `step` and `agent` states share at run time: the wait between
//! attempts, cut short by an interrupt, and the random number of its jitter. The waits
//! themselves are computed by the workflow model (`workflow::Retry`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often a wait between attempts looks at the interrupt flag.
const INTERRUPT_POLL: Duration = Duration::from_millis(25);

/// Waits `wait`, looking at `interrupt` every [`INTERRUPT_POLL`]; false when it was raised
/// (the wait is cut short).
pub(super) fn wait_unless(interrupt: &AtomicBool, wait: Duration) -> bool {
    let end = Instant::now() + wait;
    loop {
        if interrupt.load(Ordering::SeqCst) {
            return false;
        }
        let now = Instant::now();
        if now >= end {
            return true;
        }
        std::thread::sleep((end - now).min(INTERRUPT_POLL));
    }
}

/// A random number in 0..1 for the jitter: the time, hashed with a per-process random key
/// (no dependency; not for anything that needs to be unpredictable).
pub(super) fn random01() -> f64 {
    use std::hash::BuildHasher;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let bits = std::collections::hash_map::RandomState::new().hash_one(nanos);
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raised_flag_cuts_the_wait_short_and_randoms_stay_in_range() {
        let raised = AtomicBool::new(true);
        assert!(!wait_unless(&raised, Duration::from_secs(3600)));
        assert!(wait_unless(
            &AtomicBool::new(false),
            Duration::from_millis(1)
        ));
        for _ in 0..100 {
            assert!((0.0..1.0).contains(&random01()));
        }
    }
}
