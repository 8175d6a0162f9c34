//! What a conformance case runs against and what it returns: the
//! [`Target`] a backend's tests implement, the [`Verdict`], and how a
//! verdict is reported.

use std::sync::Arc;

use lock_core::backend::{LockBackend, async_trait};

/// One lock service under test.
#[async_trait]
pub trait Target: Send + Sync {
    /// The backend's name, for messages.
    fn label(&self) -> &str;

    /// A new, independent client of the same lock service (its own
    /// connections), as another process or host would have.
    async fn client(&self) -> Arc<dyn LockBackend>;

    /// A URL through which other processes reach the same locks, if any.
    fn url(&self) -> Option<String>;
}

/// How a case ended, when it did not fail.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every assertion held.
    Passed,
    /// The backend's declared capabilities rule the case out; the reason is
    /// printed with the test's output.
    NotApplicable(String),
}

/// Prints a case's verdict. "Not applicable" goes straight to the process's
/// stderr, past the test harness's output capture, so it shows in every run
/// instead of hiding behind an `ok`.
pub fn report(target: &dyn Target, case: &str, verdict: Verdict) {
    use std::io::Write;
    match verdict {
        Verdict::Passed => eprintln!("{case} on {}: passed", target.label()),
        Verdict::NotApplicable(why) => {
            let line = format!("{}::{case}: NOT APPLICABLE: {why}\n", target.label());
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
    }
}
