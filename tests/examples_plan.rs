//! Snapshot of the plan `dlq-operator render -f examples/` prints for the shipped
//! examples (reviewed against docs/ARCHITECTURE.md, "Broker topology"): a change to the planner or to the examples
//! shows up here as a diff to review.

use std::path::PathBuf;

use dlq_operator::standalone::{load_and_plan, render};

#[test]
fn examples_render_snapshot() {
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples");
    let (manifests, planned) = load_and_plan(&[examples]).expect("examples are valid");
    assert_eq!(manifests.dead_letter_queues.len(), 2);
    assert_eq!(manifests.retry_policies.len(), 2);
    assert_eq!(manifests.secrets.len(), 1);
    let rendered = render(&planned).expect("render");
    insta::assert_snapshot!("examples_render", rendered);
}
