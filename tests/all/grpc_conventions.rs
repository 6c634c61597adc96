//! gRPC conventions a service calling control relies on (issue 19 item 6): old connections are
//! asked to reconnect, so long-lived clients spread over replicas added since they connected.
//! (Reflection listing exactly a process's services: `control_api` and `router_grpc`.)

use std::time::Duration;

use crate::control_harness::{Backend, Control, ControlSetup, TestDb, run};

/// A bare HTTP/2 connection to `addr`; resolves when the server ends it.
async fn connection_lifetime(addr: std::net::SocketAddr, within: Duration) -> Option<Duration> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .expect("control's gRPC listener accepts");
    let (_send, connection) = h2::client::handshake(tcp)
        .await
        .expect("an HTTP/2 handshake");
    let started = std::time::Instant::now();
    tokio::time::timeout(within, connection)
        .await
        .ok()
        .map(|_| started.elapsed())
}

async fn old_connections_are_asked_to_go(db: TestDb) {
    let aged = Control::start(
        &db.store,
        &[],
        ControlSetup {
            grpc_max_connection_age: Some(Duration::from_secs(1)),
            ..ControlSetup::default()
        },
    )
    .await;
    // Past its age (and the grace, with no call in flight) the server ends the connection.
    let ended = connection_lifetime(aged.grpc, Duration::from_secs(15)).await;
    let took = ended.expect("control ends a connection older than its age");
    assert!(took >= Duration::from_millis(900), "ended after {took:?}");
    aged.stop().await;

    // With the default age (minutes), the same connection stays open.
    let default = Control::start(&db.store, &[], ControlSetup::default()).await;
    assert_eq!(
        connection_lifetime(default.grpc, Duration::from_secs(3)).await,
        None,
        "a young connection is left alone"
    );
    default.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_asks_connections_past_their_age_to_reconnect() {
    run(Backend::Sqlite, old_connections_are_asked_to_go).await;
}
