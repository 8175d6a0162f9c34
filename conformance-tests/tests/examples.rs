//! distlock's fenced-write examples, run against the harness's servers: the
//! holder that stalled past its lease is refused by the resource.

#[cfg(feature = "postgres")]
#[allow(dead_code)]
#[path = "../../distlock/examples/fenced_postgres.rs"]
mod fenced_postgres;

#[cfg(feature = "redis")]
#[allow(dead_code)]
#[path = "../../distlock/examples/fenced_redis.rs"]
mod fenced_redis;

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_postgres_refuses_the_stalled_holder() {
    use conformance_tests::servers::SqlServer;
    let server = conformance_tests::servers::postgres::Postgres::shared().await;
    let (new_write, stale_write) = fenced_postgres::run(&server.url("")).await.unwrap();
    assert_eq!(new_write, "accepted");
    assert!(stale_write.starts_with("refused"), "{stale_write}");
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_redis_refuses_the_stalled_holder() {
    let server = conformance_tests::servers::redis::Redis::shared().await;
    let (new_write, stale_write) = fenced_redis::run(&server.url("")).await.unwrap();
    assert_eq!(new_write, "accepted");
    assert!(stale_write.starts_with("refused"), "{stale_write}");
}
