//! The conformance suite, once per backend. Adding a backend is one line.
#![recursion_limit = "256"]

use conformance_tests::targets::*;
use conformance_tests::{conformance_core, conformance_suite};

conformance_suite!(memory, async { MemoryTarget::new() });
conformance_suite!(sqlite, async { UrlTarget::sqlite() });
conformance_suite!(postgres, UrlTarget::postgres());
conformance_suite!(mariadb, UrlTarget::mariadb());
conformance_suite!(redis, UrlTarget::redis());
conformance_suite!(redis_cluster, UrlTarget::redis_cluster());
conformance_suite!(redis_sentinel, UrlTarget::redis_sentinel());
conformance_suite!(redis_sentinel_wait, UrlTarget::redis_sentinel_wait());
conformance_suite!(redlock, UrlTarget::redlock());
conformance_suite!(etcd, UrlTarget::etcd());
conformance_suite!(memcache, UrlTarget::memcache());
conformance_suite!(zk, UrlTarget::zk());
conformance_suite!(zk_ensemble, UrlTarget::zk_ensemble());
conformance_core!(memcache_tls, UrlTarget::memcache_tls());
conformance_core!(redis_tls, UrlTarget::redis_tls());
conformance_core!(redlock_tls, UrlTarget::redlock_tls());
conformance_core!(zk_tls, UrlTarget::zk_tls());
conformance_core!(zk_auth, UrlTarget::zk_auth());
conformance_core!(etcd_tls, UrlTarget::etcd_tls());
conformance_suite!(etcd_auth, UrlTarget::etcd_auth());
conformance_core!(postgres_tls, UrlTarget::postgres_tls());
conformance_core!(mariadb_tls, UrlTarget::mariadb_tls());
conformance_core!(postgres_granted, UrlTarget::postgres_granted());
conformance_core!(mariadb_granted, UrlTarget::mariadb_granted());
