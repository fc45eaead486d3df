//! How the adapter words a failure, shared by its HTTP and AMQP clients: the error of a
//! request or connection that failed at every address of a Secret ([`all_failed`]), and an
//! error with its sources as one line ([`error_chain`]).

use crate::broker::BrokerError;

/// The error of a connection or request that failed at every address (`failures`, in the
/// order tried; `name` gives an address's redacted URI): with one address, its own error;
/// with several, the first error that is not [`BrokerError::Unreachable`] (a TLS or
/// protocol problem says more than a refused connection), else one `Unreachable` that
/// names every address tried and why each failed.
pub(crate) fn all_failed(
    failures: Vec<(usize, BrokerError)>,
    name: impl Fn(usize) -> String,
    several: bool,
) -> BrokerError {
    if !several || failures.len() <= 1 {
        return failures
            .into_iter()
            .next()
            .map(|(_, e)| e)
            .unwrap_or_else(|| BrokerError::Unreachable {
                endpoint: String::new(),
                reason: "no address to try".into(),
            });
    }
    if let Some(pos) = failures
        .iter()
        .position(|(_, e)| !matches!(e, BrokerError::Unreachable { .. }))
    {
        return failures
            .into_iter()
            .nth(pos)
            .map(|(_, e)| e)
            .unwrap_or_else(|| BrokerError::Unreachable {
                endpoint: String::new(),
                reason: "no address to try".into(),
            });
    }
    let endpoints: Vec<String> = failures.iter().map(|(i, _)| name(*i)).collect();
    let reasons: Vec<String> = failures
        .iter()
        .map(|(i, e)| match e {
            BrokerError::Unreachable { reason, .. } => format!("{}: {reason}", name(*i)),
            other => format!("{}: {other}", name(*i)),
        })
        .collect();
    BrokerError::Unreachable {
        endpoint: format!("every address ({})", endpoints.join(", ")),
        reason: reasons.join("; "),
    }
}

/// The error and its sources, joined with `: ` (without URLs for reqwest errors).
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}
