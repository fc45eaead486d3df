//! What a resource's status says, decided without I/O (but for [`events::publish`], which
//! records an Event) and shared by every driver (the
//! Kubernetes controller writes it, `run --standalone` logs it, `dlq-operator report`
//! scores it): status conditions ([`conditions`], Kubernetes API conventions), the backlog
//! part of a DeadLetterQueue's status after a reading ([`backlog`]), the `RouterReady`
//! condition ([`router`]) from a [`reading`] of one poll, the maturity facts and `status.maturity` ([`maturity`]), and the
//! Events of a change ([`events`]).

pub mod backlog;
pub mod conditions;
pub mod events;
pub mod maturity;
pub mod reading;
pub mod router;

pub use backlog::{
    backlog_condition, backlog_events, backlog_status, reachable_condition, reachable_events,
    resumed_evaluator, Reading,
};
pub use events::{publish, truncate_note, Note, MAX_NOTE_BYTES};
pub use router::{router_condition, router_events, set_router_condition};
