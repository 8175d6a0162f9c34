//! What the benchmark reads from a target's URL.

/// The scheme of `url` (what picks the backend, its floor and its peers).
pub(super) fn scheme(url: &str) -> &str {
    url.split_once(':').map_or(url, |(s, _)| s)
}
