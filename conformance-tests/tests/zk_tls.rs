//! ZooKeeper over TLS (a `secureClientPort`, client certificates required):
//! TLS settings that cannot work are refused clearly and in time.

use std::time::Duration;

use conformance_tests::servers::zookeeper::ZooKeeper;
use conformance_tests::tls_refusals::refused_clearly;

const CONNECT_TIMEOUT: Duration = Duration::from_millis(1500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tls_settings_are_refused_clearly() {
    let server = ZooKeeper::start_tls().await;
    let hosts = server.connect_string();
    let url = |tls: &str| {
        format!(
            "zk://{hosts}/refused?connect_timeout={}ms&timeout=1s&{tls}",
            CONNECT_TIMEOUT.as_millis()
        )
    };
    refused_clearly("ZooKeeper", url, 2 * CONNECT_TIMEOUT, None).await;
}
