//! TEMPORARY stub.
#![allow(missing_docs, dead_code, unused_variables)]
use super::*;
pub struct RabbitMq;
impl RabbitMq {
    pub fn new(c: &BrokerConnection) -> Result<Self, BrokerError> {
        Ok(RabbitMq)
    }
}
impl Broker for RabbitMq {
    async fn apply(&self, plan: &DesiredTopology) -> Result<ApplyReport, BrokerError> {
        Ok(ApplyReport::default())
    }
    async fn queue_depths(&self, vhost: &str) -> Result<BTreeMap<String, QueueDepth>, BrokerError> {
        Ok(BTreeMap::new())
    }
}
