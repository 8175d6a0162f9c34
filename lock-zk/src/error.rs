//! ZooKeeper's errors as distlock errors, and which failed writes certainly
//! changed nothing.

use lock_core::Error;
use zookeeper_client as zk;

/// Whether a failed write certainly changed nothing on the server.
pub(crate) fn no_data_change(e: &zk::Error) -> bool {
    use zk::Error as E;
    matches!(
        e,
        E::NoNode
            | E::NoAuth
            | E::BadVersion
            | E::NoChildrenForEphemerals
            | E::NodeExists
            | E::NotEmpty
            | E::InvalidAcl
            | E::AuthFailed
            | E::SessionMoved
            | E::NotReadOnly
            | E::QuotaExceeded
            | E::Throttled
            | E::MarshallingError
            | E::Unimplemented
            | E::BadArguments(_)
            | E::SessionExpired
            | E::ClientClosed
    )
}

/// ZooKeeper's answer to `operation` as a distlock error: the ones a retry
/// (or a new session) can get past are `Unavailable`.
///
/// zookeeper-client fails the requests in flight on a connection that broke
/// with the error that broke it: `ConnectionLoss` when the server closed it,
/// but a `Custom` error for an I/O error or a server silent past the
/// client's timeout ("no response from connection in …"). Those are
/// connection losses too — the request's outcome is unknown, and a retry on
/// the next connection can get past them.
pub(crate) fn convert(operation: &'static str, e: zk::Error) -> Error {
    use zk::Error as E;
    match e {
        E::ConnectionLoss
        | E::Custom(_)
        | E::Timeout
        | E::NoHosts
        | E::SessionExpired
        | E::SessionMoved
        | E::ClientClosed
        | E::Throttled
        | E::NotReadOnly => Error::unavailable_from(crate::NAME, operation, e),
        other => Error::backend_from(crate::NAME, operation, other),
    }
}

/// A retryable failure described by `message`.
pub(crate) fn unavailable(message: String) -> Error {
    Error::unavailable(crate::NAME, message)
}
