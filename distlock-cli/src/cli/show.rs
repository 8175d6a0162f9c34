//! How the CLI prints values in its messages.

/// A duration as distlock prints it.
pub(super) fn human(d: std::time::Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}
