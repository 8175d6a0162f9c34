//! What both memcached test binaries use.

use std::sync::Arc;

use distlock::backends::memcache::MemcacheBackend;

pub(crate) async fn backend(url: &str) -> Arc<MemcacheBackend> {
    Arc::new(MemcacheBackend::connect(url).await.expect("connect"))
}
