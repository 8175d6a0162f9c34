//! etcd client errors → distlock errors: which ones a retry may get past.

use lock_core::Error;
use tonic::Code as tonic_code;

/// Converts an error from `operation`.
pub(crate) fn convert(operation: &'static str, e: etcd_client::Error) -> Error {
    use etcd_client::Error as E;
    match e {
        E::GRpcStatus(status)
            if matches!(
                status.code(),
                // Unknown: a broken HTTP/2 stream to a member that died.
                // Cancelled: the client's own request timeout (tonic's
                // `TimeoutExpired`, racing ours), or etcd's "request
                // cancelled"; either way the outcome is unknown and a retry
                // may get through.
                tonic_code::Unavailable
                    | tonic_code::Cancelled
                    | tonic_code::DeadlineExceeded
                    | tonic_code::Aborted
                    | tonic_code::ResourceExhausted
                    | tonic_code::Unknown
            ) =>
        {
            Error::unavailable(crate::NAME, format!("{operation}: {}", status.message()))
                .with_source(status)
        }
        // With auth on, a user whose role lacks the key prefix: say which
        // right is missing (README, "Least privilege").
        E::GRpcStatus(status) if status.code() == tonic_code::PermissionDenied => {
            Error::backend(format!(
                "{} {operation}: permission denied ({}): the user's role needs readwrite \
                 on the URL's key prefix (etcdctl role grant-permission ROLE --prefix=true \
                 readwrite PREFIX)",
                crate::NAME,
                status.message()
            ))
            .with_source(status)
        }
        E::TransportError(_)
        | E::IoError(_)
        | E::WatchError(_)
        | E::LeaseKeepAliveError(_)
        | E::EndpointError(_) => Error::unavailable_from(crate::NAME, operation, e),
        other => Error::backend_from(crate::NAME, operation, other),
    }
}

/// etcd has no lease with that ID: it expired or was revoked
/// (`ErrGRPCLeaseNotFound`).
pub(crate) fn lease_not_found(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s) if s.code() == tonic_code::NotFound)
}
