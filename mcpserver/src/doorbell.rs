//! The monitor's sleep: until rung, or for a while.
//!
//! `std::thread::park_timeout` turns its timeout into a deadline, so every tick of the
//! monitor would read the clock through the C library, whose code sits in pages the
//! server otherwise never touches (measured: about 25 KiB more resident memory per
//! process, on average over address layouts). On Linux the doorbell is a futex with a
//! relative timeout: the kernel counts the time. Elsewhere it is a mutex and a
//! condition variable.

use std::time::Duration;

/// Wakes one sleeper, like `park`/`unpark`: a ring while nobody sleeps is kept for the
/// next `wait`. Wake-ups may also be spurious; the caller re-checks its state.
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
pub(crate) struct Doorbell {
    rung: std::sync::atomic::AtomicU32,
}

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
pub(crate) use portable::Doorbell;

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
impl Doorbell {
    pub(crate) fn new() -> Doorbell {
        Doorbell {
            rung: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// Returns when rung (now or before), after `timeout`, or spuriously.
    pub(crate) fn wait(&self, timeout: Option<Duration>) {
        use std::sync::atomic::Ordering;
        if self.rung.swap(0, Ordering::Acquire) == 1 {
            return;
        }
        crate::linux::futex_wait(&self.rung, 0, timeout);
        self.rung.swap(0, Ordering::Acquire);
    }

    pub(crate) fn ring(&self) {
        use std::sync::atomic::Ordering;
        if self.rung.swap(1, Ordering::Release) == 0 {
            crate::linux::futex_wake_one(&self.rung);
        }
    }
}

/// The doorbell where there is no futex; on Linux it is built for its tests only.
#[cfg(any(
    test,
    not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))
))]
mod portable {
    use std::sync::{Condvar, Mutex};
    use std::time::Duration;

    pub(crate) struct Doorbell {
        rung: Mutex<bool>,
        cv: Condvar,
    }

    impl Doorbell {
        pub(crate) fn new() -> Doorbell {
            Doorbell {
                rung: Mutex::new(false),
                cv: Condvar::new(),
            }
        }

        /// Returns when rung (now or before), after `timeout`, or spuriously.
        pub(crate) fn wait(&self, timeout: Option<Duration>) {
            let mut rung = self.rung.lock().unwrap_or_else(|e| e.into_inner());
            if !*rung {
                rung = match timeout {
                    Some(t) => {
                        self.cv
                            .wait_timeout(rung, t)
                            .unwrap_or_else(|e| e.into_inner())
                            .0
                    }
                    None => self.cv.wait(rung).unwrap_or_else(|e| e.into_inner()),
                };
            }
            *rung = false;
        }

        pub(crate) fn ring(&self) {
            *self.rung.lock().unwrap_or_else(|e| e.into_inner()) = true;
            self.cv.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    macro_rules! doorbell_tests {
        ($name:ident, $bell:ty) => {
            mod $name {
                use super::*;

                #[test]
                fn a_ring_before_the_wait_is_kept() {
                    let bell = <$bell>::new();
                    bell.ring();
                    // Would sleep forever if the ring were lost.
                    bell.wait(None);
                }

                #[test]
                fn a_ring_wakes_a_sleeper_and_a_timeout_ends_the_wait() {
                    let bell = Arc::new(<$bell>::new());
                    let sleeper = {
                        let bell = bell.clone();
                        std::thread::spawn(move || bell.wait(None))
                    };
                    // Whether the ring lands before or during the wait, the sleeper returns.
                    bell.ring();
                    sleeper.join().unwrap();
                    // Nothing rings: only the timeout can end this wait.
                    bell.wait(Some(Duration::from_millis(1)));
                }
            }
        };
    }

    doorbell_tests!(default, super::super::Doorbell);
    doorbell_tests!(portable, super::super::portable::Doorbell);
}
