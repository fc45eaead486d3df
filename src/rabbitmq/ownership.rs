//! Ownership records: which DeadLetterQueue owns each queue and exchange name, kept on
//! the broker itself, so that ownership holds across separate `apply` runs, across the
//! drivers (`apply`, `run --standalone`, the controller) and across operator instances
//! that share a broker (docs/ARCHITECTURE.md, "Ownership on the broker").
//!
//! Why a record and not the objects: policy definitions accept only the keys RabbitMQ
//! knows (`x-owner` is refused with "not recognised policy settings"), queue and exchange
//! arguments are fixed at declaration (so a queue made by an earlier version, or a source
//! queue the user declared, can never carry a mark), and the broker has no other
//! free-form, per-name store a `policymaker` user may write. A RabbitMQ *global
//! parameter* (`PUT /api/global-parameters/{name}`, RabbitMQ docs, "Parameters and
//! Policies"; allowed to the `policymaker` tag on 3.10 and 4.0, tried on 3.10.8 and
//! 4.0.5) holds one small JSON document per name:
//!
//! ```text
//! dlq-operator.owner.<sha-256 hex of vhost, kind and name>
//!   {"owner":"default/orders","vhost":"/","kind":"queue","name":"orders.dlq","role":"dead-letter queue"}
//! ```
//!
//! The parameter's name is a hash because RabbitMQ turns global parameter names into
//! Erlang atoms, which are limited to 255 characters (a longer name answers HTTP 500),
//! while a vhost and a queue name may each be 255 bytes; the value says in clear what
//! the record is about (`rabbitmqctl list_global_parameters` shows it).
//!
//! Rules:
//! - Owner identity is the DeadLetterQueue's `namespace/name`, whichever driver applies
//!   it: manifests applied with `apply -f` can move into a cluster unchanged.
//! - Every apply reads the record of each name it claims ([`claims`]) before any write;
//!   a name recorded for another owner stops the whole apply with
//!   [`BrokerError::NameOwned`] (no object is written). Then it writes the records that
//!   are missing ("claim before write"); a steady state writes none.
//! - A name without a record (made by hand, or by a version before records existed) is
//!   recorded by the first DeadLetterQueue that plans it.
//! - Records go when their object goes (an obsolete tier or retired dead-letter queue
//!   deleted, a `deletionPolicy: Delete` removal); `Retain` and the standalone commands
//!   keep them, so another DeadLetterQueue cannot silently take over a retained
//!   topology: `rabbitmqctl clear_global_parameter NAME` releases a name.
//! - The dead-letter exchange's record also lists the dead-letter queues that were
//!   unbound from it after `spec.deadLetter.queue` (or the partitions) changed and still
//!   exist (`retired`), so later applies keep reporting them and delete them once empty.
//! - Two writers that claim the same free name at the same instant can both pass the
//!   check (the management API has no compare-and-set); the next apply of the one whose
//!   record was overwritten reports the conflict and writes nothing more.

use reqwest::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::management::encode_segment as enc;
use super::RabbitMq;
use crate::broker::{Action, BrokerError, ObjectKind, Outcome};
use crate::topology::{DesiredTopology, QueueRole};

/// Prefix of every ownership record's global parameter name.
pub const RECORD_PREFIX: &str = "dlq-operator.owner.";

/// `kind` of a record for a queue.
pub const QUEUE: &str = "queue";
/// `kind` of a record for an exchange.
pub const EXCHANGE: &str = "exchange";

/// Role of the source queue.
pub const SOURCE_ROLE: &str = "source queue";

/// Role recorded for a router inbox (router mode; docs/ROUTER.md).
pub const INBOX_ROLE: &str = "router inbox";

/// Role of a dead-letter queue that is no longer planned but still holds dead letters.
pub const RETIRED_ROLE: &str = "retired dead-letter queue";

/// One ownership record: the value of its global parameter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerRecord {
    /// `namespace/name` of the owning DeadLetterQueue.
    pub owner: String,
    /// Virtual host of the object.
    pub vhost: String,
    /// [`QUEUE`] or [`EXCHANGE`].
    pub kind: String,
    /// Object name.
    pub name: String,
    /// What the object is to its owner (`source queue`, `dead-letter queue`, …).
    pub role: String,
    /// On a dead-letter exchange's record only: dead-letter queues unbound from it that
    /// may still hold dead letters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired: Vec<String>,
}

impl OwnerRecord {
    /// The global parameter name of this record ([`record_name`]).
    pub fn parameter(&self) -> String {
        record_name(&self.vhost, &self.kind, &self.name)
    }
}

/// The global parameter name of the record for object `name` of kind `kind` in `vhost`:
/// [`RECORD_PREFIX`] + the SHA-256 (hex) of the three, each followed by a NUL byte (no
/// name contains NUL, so two different triples never hash the same input).
pub fn record_name(vhost: &str, kind: &str, name: &str) -> String {
    let mut h = Sha256::new();
    for part in [vhost, kind, name] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    format!("{RECORD_PREFIX}{:x}", h.finalize())
}

/// One name a plan claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// [`QUEUE`] or [`EXCHANGE`].
    pub kind: &'static str,
    /// Object name.
    pub name: String,
    /// What it is to the plan's owner (the record's `role`).
    pub role: String,
    /// The DeadLetterQueue field that makes the name (for `NameConflict`).
    pub field: &'static str,
}

impl Claim {
    /// The record this claim writes for `plan`'s owner.
    pub fn record(&self, plan: &DesiredTopology) -> OwnerRecord {
        OwnerRecord {
            owner: plan.owner.clone(),
            vhost: plan.vhost.clone(),
            kind: self.kind.to_string(),
            name: self.name.clone(),
            role: self.role.clone(),
            retired: Vec::new(),
        }
    }
}

/// Every queue and exchange `plan` declares or takes over, the source queue first (two
/// DeadLetterQueues on one source queue are reported as such), then the dead-letter
/// queues, the exchanges and the retry tiers. The source exchange is not claimed: the
/// operator only binds to it. Pure.
pub fn claims(plan: &DesiredTopology) -> Vec<Claim> {
    let mut queues: Vec<Claim> = plan
        .queues
        .iter()
        .map(|q| {
            let (role, field) = match q.role {
                QueueRole::Source => (SOURCE_ROLE.to_string(), "spec.source.queue"),
                QueueRole::DeadLetter { class: None } => {
                    ("dead-letter queue".to_string(), "spec.deadLetter.queue")
                }
                QueueRole::DeadLetter { class: Some(c) } => (
                    format!("dead-letter queue of error class {}", c.slug()),
                    "spec.deadLetter.queue",
                ),
                QueueRole::Retry { delay_ms } => (
                    format!("retry tier {}", crate::duration::format_ms(delay_ms)),
                    "spec.source.queue",
                ),
                QueueRole::Inbox => (INBOX_ROLE.to_string(), "spec.router.enabled"),
            };
            Claim {
                kind: QUEUE,
                name: q.name.clone(),
                role,
                field,
            }
        })
        .collect();
    // Source, dead-letter queues, (exchanges), tiers.
    queues.sort_by_key(|c| match c.field {
        "spec.source.queue" if c.role == SOURCE_ROLE => 0,
        "spec.deadLetter.queue" | "spec.router.enabled" => 1,
        _ => 3,
    });
    let exchanges = plan.exchanges.iter().map(|x| {
        let (role, field) = if x.name == plan.routes.dead_letter_exchange {
            ("dead-letter exchange", "spec.deadLetter.exchange")
        } else if plan.routes.inbox.as_ref() == Some(&x.name) {
            ("router inbox exchange", "spec.router.enabled")
        } else {
            ("retry exchange", "spec.source.queue")
        };
        Claim {
            kind: EXCHANGE,
            name: x.name.clone(),
            role: role.to_string(),
            field,
        }
    });
    let split = queues
        .iter()
        .position(|c| c.kind == QUEUE && c.role.starts_with("retry tier"))
        .unwrap_or(queues.len());
    let tiers = queues.split_off(split);
    queues.extend(exchanges);
    queues.extend(tiers);
    queues
}

/// What a user reads when other owners' records hold names a plan needs (`conflicts`,
/// the plan's source queue first): every such name, who owns it and where that is
/// recorded, and what to do — one command that releases them all when their owner is
/// gone, so a takeover is one decision, not one apply per name.
pub fn conflict_message(conflicts: &[(Claim, OwnerRecord)]) -> String {
    let Some((claim, record)) = conflicts.first() else {
        return String::new();
    };
    let mut out = format!(
        "{} {:?} belongs to DeadLetterQueue {} on this broker (its {}; ownership record: global parameter {})",
        claim.kind,
        claim.name,
        record.owner,
        record.role,
        record.parameter()
    );
    let rest: Vec<String> = conflicts[1..]
        .iter()
        .map(|(c, r)| {
            let whose = if r.owner == record.owner {
                String::new()
            } else {
                format!("DeadLetterQueue {}, ", r.owner)
            };
            format!("{} {:?} ({whose}its {})", c.kind, c.name, r.role)
        })
        .collect();
    if !rest.is_empty() {
        out.push_str(&format!(
            "; so do {} more name(s) this resource plans: {}",
            rest.len(),
            rest.join(", ")
        ));
    }
    let mut owners: Vec<&str> = Vec::new();
    for (_, r) in conflicts {
        if !owners.contains(&r.owner.as_str()) {
            owners.push(&r.owner);
        }
    }
    let gone = if owners.len() == 1 {
        format!("{} no longer exists", owners[0])
    } else {
        format!("{} no longer exist", owners.join(" and "))
    };
    let parameters: Vec<String> = conflicts.iter().map(|(_, r)| r.parameter()).collect();
    let release = if parameters.len() == 1 {
        format!("rabbitmqctl clear_global_parameter {}", parameters[0])
    } else {
        format!(
            "for p in {}; do rabbitmqctl clear_global_parameter $p; done",
            parameters.join(" ")
        )
    };
    out.push_str(&format!(
        ". Each queue and exchange belongs to one DeadLetterQueue: choose other names (or change the owning DeadLetterQueue instead), or, if {gone}, release the names with `{release}`"
    ));
    out
}

/// The report lines of the records an apply wrote: `ownership records for N names:
/// created` / `updated` (none when none was written).
pub fn record_actions(created: usize, updated: usize) -> Vec<Action> {
    [(created, Outcome::Created), (updated, Outcome::Updated)]
        .into_iter()
        .filter(|(count, _)| *count > 0)
        .map(|(count, outcome)| Action {
            kind: ObjectKind::Ownership,
            name: if count == 1 {
                "for 1 name".to_string()
            } else {
                format!("for {count} names")
            },
            outcome,
        })
        .collect()
}

/// The records of `found` to write for `plan`, in claim order, for the claims `adopted`
/// accepts: a missing one ([`Outcome::Created`]) or one that names another role
/// ([`Outcome::Updated`], keeping a dead-letter exchange's `retired` list, e.g. a
/// dead-letter queue named again after it was retired). A record already as claimed is
/// not written again. Pure.
pub fn records_to_write(
    plan: &DesiredTopology,
    found: &Found,
    adopted: impl Fn(&Claim) -> bool,
) -> Vec<(OwnerRecord, Outcome)> {
    found
        .iter()
        .filter(|(c, _)| adopted(c))
        .filter_map(|(claim, existing)| {
            let mut record = claim.record(plan);
            match existing {
                Some(e) if e.role == record.role => None,
                Some(e) => {
                    record.retired = e.retired.clone();
                    Some((record, Outcome::Updated))
                }
                None => Some((record, Outcome::Created)),
            }
        })
        .collect()
}

/// A claim of a plan and the record found for it (`None`: no record yet).
pub type Found = Vec<(Claim, Option<OwnerRecord>)>;

/// The claim of exchange `name` in `found` and the names its record lists as `retired`.
pub fn exchange_with_retired<'f>(
    found: &'f Found,
    name: &str,
) -> Option<(&'f Claim, std::collections::BTreeSet<String>)> {
    found
        .iter()
        .find(|(c, _)| c.kind == EXCHANGE && c.name == name)
        .map(|(c, r)| {
            let listed = r
                .as_ref()
                .map(|r| r.retired.iter().cloned().collect())
                .unwrap_or_default();
            (c, listed)
        })
}

impl RabbitMq {
    /// The ownership record of object `name` (`kind`: [`QUEUE`] or [`EXCHANGE`]) in
    /// `vhost`: `GET /api/global-parameters/{record_name}`; `None` when there is none.
    ///
    /// # Errors
    /// Transport and authentication errors; [`BrokerError::Api`] for another refusal
    /// (e.g. a user without the `policymaker` tag) and for a parameter under that name
    /// that is not an ownership record of this object (edited by hand): it is never read
    /// as "no owner".
    pub async fn owner_record(
        &self,
        vhost: &str,
        kind: &str,
        name: &str,
    ) -> Result<Option<OwnerRecord>, BrokerError> {
        #[derive(Deserialize)]
        struct Parameter {
            value: serde_json::Value,
        }
        let parameter = record_name(vhost, kind, name);
        let path = format!("global-parameters/{}", enc(&parameter));
        let found = match self.get_opt::<Parameter>(&path).await {
            Ok(Some(found)) => found,
            Ok(None) => return Ok(None),
            Err(BrokerError::Api {
                method,
                path,
                status: 401,
                reason,
            }) => {
                return Err(BrokerError::Api {
                    method,
                    path,
                    status: 401,
                    reason: format!(
                        "{reason}: the operator's ownership records are global parameters, which RabbitMQ lets only users with the `policymaker` (or `administrator`) tag read and write; `rabbitmqctl set_user_tags USER policymaker`"
                    ),
                })
            }
            Err(e) => return Err(e),
        };
        let unreadable = |why: String| {
            BrokerError::Api {
            method: "GET".into(),
            path: format!("/api/{path}"),
            status: 200,
            reason: format!(
                "global parameter {parameter} is not an ownership record of {kind} {name:?} in vhost {vhost:?} ({why}); fix or clear it (`rabbitmqctl clear_global_parameter {parameter}`)"
            ),
        }
        };
        let record: OwnerRecord =
            serde_json::from_value(found.value).map_err(|e| unreadable(e.to_string()))?;
        if (
            record.vhost.as_str(),
            record.kind.as_str(),
            record.name.as_str(),
        ) != (vhost, kind, name)
        {
            return Err(unreadable(format!(
                "it is about {} {:?} in vhost {:?}",
                record.kind, record.name, record.vhost
            )));
        }
        Ok(Some(record))
    }

    /// Whether the ownership record of queue `name` of `plan`'s vhost names `plan`'s owner.
    ///
    /// # Errors
    /// As [`RabbitMq::owner_record`].
    pub async fn records_queue_of(
        &self,
        plan: &DesiredTopology,
        name: &str,
    ) -> Result<bool, BrokerError> {
        Ok(self
            .owner_record(&plan.vhost, QUEUE, name)
            .await?
            .is_some_and(|r| r.owner == plan.owner))
    }

    /// Writes `record` (`PUT /api/global-parameters/{name}`).
    ///
    /// # Errors
    /// Transport, authentication and API errors.
    pub async fn put_owner_record(&self, record: &OwnerRecord) -> Result<(), BrokerError> {
        let path = format!("global-parameters/{}", enc(&record.parameter()));
        self.mgmt
            .write(
                Method::PUT,
                &path,
                Some(&json!({ "name": record.parameter(), "value": record })),
                None,
            )
            .await
    }

    /// Deletes the ownership record of object `name` of `kind` in `vhost`; a record that
    /// is already gone counts as deleted.
    ///
    /// # Errors
    /// Transport, authentication and API errors.
    pub async fn delete_owner_record(
        &self,
        vhost: &str,
        kind: &str,
        name: &str,
    ) -> Result<(), BrokerError> {
        let path = format!("global-parameters/{}", enc(&record_name(vhost, kind, name)));
        let answer = self.mgmt.send(Method::DELETE, &path, None).await?;
        if answer.status.is_success() || answer.status == StatusCode::NOT_FOUND {
            Ok(())
        } else {
            Err(self.mgmt.api_error(&Method::DELETE, &path, &answer))
        }
    }

    /// Reads the record of every name `plan` claims ([`claims`]), one GET each, and
    /// returns them with their claims.
    ///
    /// # Errors
    /// [`BrokerError::NameOwned`] when records name another owner, naming the field of the
    /// first such claim and listing them all (the caller must then write nothing); the
    /// errors of [`RabbitMq::owner_record`].
    pub async fn check_claims(&self, plan: &DesiredTopology) -> Result<Found, BrokerError> {
        let found = self.check_claims_where(plan, |_| true).await?;
        self.check_source_exchange(plan).await?;
        Ok(found)
    }

    /// `spec.source.exchange` must not be an exchange the operator manages (another
    /// resource's, or this one's, dead-letter or retry exchange, by its record): binding
    /// the source queue there would deliver that resource's dead letters or retries to
    /// this source queue's consumers.
    ///
    /// # Errors
    /// [`BrokerError::NameOwned`] naming `spec.source.exchange`; as
    /// [`RabbitMq::owner_record`].
    async fn check_source_exchange(&self, plan: &DesiredTopology) -> Result<(), BrokerError> {
        let Some(x) = &plan.source_exchange else {
            return Ok(());
        };
        let Some(record) = self.owner_record(&plan.vhost, EXCHANGE, x).await? else {
            return Ok(());
        };
        let whose = if record.owner == plan.owner {
            "this DeadLetterQueue's own".to_string()
        } else {
            format!("DeadLetterQueue {}'s", record.owner)
        };
        Err(BrokerError::NameOwned {
            field: "spec.source.exchange",
            message: format!(
                "exchange {x:?} is {whose} {} (ownership record: global parameter {}): binding the source queue {:?} to it would deliver those messages to this queue's consumers; name the exchange your publishers use",
                record.role,
                record.parameter(),
                plan.routes.source_queue
            ),
        })
    }

    /// [`RabbitMq::check_claims`] for the claims `wanted` selects only (e.g. the queues a
    /// `dlq` command reads and writes).
    ///
    /// # Errors
    /// As [`RabbitMq::check_claims`].
    pub async fn check_claims_where(
        &self,
        plan: &DesiredTopology,
        wanted: impl Fn(&Claim) -> bool,
    ) -> Result<Found, BrokerError> {
        let mut found = Vec::new();
        let mut taken = Vec::new();
        for claim in claims(plan).into_iter().filter(|c| wanted(c)) {
            let record = self
                .owner_record(&plan.vhost, claim.kind, &claim.name)
                .await?;
            match record {
                Some(r) if r.owner != plan.owner => taken.push((claim, r)),
                record => found.push((claim, record)),
            }
        }
        match taken.first() {
            None => Ok(found),
            Some((first, _)) => Err(BrokerError::NameOwned {
                field: first.field,
                message: conflict_message(&taken),
            }),
        }
    }
}

/// The ownership records a removal must respect ([`RabbitMq::ownership_for_removal`]).
#[derive(Debug, Default)]
pub struct ForRemoval {
    /// Claimed names whose record names another owner: `(kind, name)`.
    foreign: Vec<(&'static str, String)>,
    /// Claimed names whose record names this owner.
    own: Vec<(&'static str, String)>,
    /// Dead-letter queues the plan's owner retired (its dead-letter exchange's record).
    pub retired: Vec<String>,
    /// Obsolete retry tiers it kept (its retry exchange's record): their records go with
    /// the rest.
    retired_tiers: Vec<String>,
}

impl ForRemoval {
    /// Sorts the records `found` for the claims of `plan`: another owner's (left alone),
    /// this owner's, the dead-letter queues its dead-letter exchange's record lists as
    /// `retired` and the tiers its retry exchange's record lists (each queue's own record
    /// is checked later: [`RabbitMq::ownership_for_removal`],
    /// [`RabbitMq::release_ownership`]). Pure.
    pub fn of(plan: &DesiredTopology, found: Found) -> Self {
        let mut out = ForRemoval::default();
        for (claim, record) in found {
            let Some(record) = record else {
                continue;
            };
            if record.owner != plan.owner {
                out.foreign.push((claim.kind, claim.name));
                continue;
            }
            if claim.kind == EXCHANGE && claim.name == plan.routes.dead_letter_exchange {
                out.retired = record.retired.clone();
            }
            if claim.kind == EXCHANGE && claim.name == plan.routes.retry_exchange {
                out.retired_tiers = record.retired.clone();
            }
            out.own.push((claim.kind, claim.name));
        }
        out
    }

    /// Queue `name` belongs to another DeadLetterQueue.
    pub fn foreign_queue(&self, name: &str) -> bool {
        self.foreign.iter().any(|(k, n)| *k == QUEUE && n == name)
    }

    /// Exchange `name` belongs to another DeadLetterQueue.
    pub fn foreign_exchange(&self, name: &str) -> bool {
        self.foreign
            .iter()
            .any(|(k, n)| *k == EXCHANGE && n == name)
    }
}

impl RabbitMq {
    /// Reads the records of every name `plan` claims for a removal: which are another
    /// owner's (left alone), which are this owner's, and the dead-letter queues it
    /// retired.
    ///
    /// # Errors
    /// As [`RabbitMq::owner_record`].
    pub async fn ownership_for_removal(
        &self,
        plan: &DesiredTopology,
    ) -> Result<ForRemoval, BrokerError> {
        let mut found = Vec::new();
        for claim in claims(plan) {
            let record = self
                .owner_record(&plan.vhost, claim.kind, &claim.name)
                .await?;
            found.push((claim, record));
        }
        let mut out = ForRemoval::of(plan, found);
        // A retired queue counts only while its own record names this resource.
        let mut retired = Vec::new();
        for name in std::mem::take(&mut out.retired) {
            if self.records_queue_of(plan, &name).await? {
                retired.push(name);
            }
        }
        out.retired = retired;
        Ok(out)
    }

    /// Deletes the records `records` found as this owner's, and those of its retired
    /// dead-letter queues and kept obsolete tiers.
    ///
    /// # Errors
    /// Transport, authentication and API errors.
    pub async fn release_ownership(
        &self,
        plan: &DesiredTopology,
        records: &ForRemoval,
    ) -> Result<(), BrokerError> {
        let retired = records.retired.iter().map(|n| (QUEUE, n.clone()));
        for (kind, name) in records.own.iter().cloned().chain(retired) {
            self.delete_owner_record(&plan.vhost, kind, &name).await?;
        }
        for name in &records.retired_tiers {
            if self.records_queue_of(plan, name).await? {
                self.delete_owner_record(&plan.vhost, QUEUE, name).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::ResolvedPolicy;
    use crate::crd::{DeadLetterQueueSpec, PartitionBy, RetryPolicySpec};

    fn plan(partitioned: bool) -> DesiredTopology {
        let mut spec: DeadLetterQueueSpec =
            serde_json::from_value(serde_json::json!({"source": {"queue": "orders"}, "retryPolicyRef": {"name": "p"}, "broker": {"secretRef": {"name": "s"}}}))
                .expect("spec");
        if partitioned {
            spec.dead_letter.partition_by = PartitionBy::ErrorClass;
        }
        let policy = ResolvedPolicy::from_spec(&RetryPolicySpec::default()).expect("policy");
        crate::topology::plan("default/orders", &spec, &policy)
    }

    #[test]
    fn record_names_are_short_distinct_and_stable() {
        let a = record_name("/", QUEUE, "orders");
        assert!(a.starts_with(RECORD_PREFIX));
        assert_eq!(a.len(), RECORD_PREFIX.len() + 64);
        assert_eq!(a, record_name("/", QUEUE, "orders"));
        assert_ne!(a, record_name("/", EXCHANGE, "orders"));
        assert_ne!(a, record_name("/x", QUEUE, "orders"));
        // The separator keeps ("a", "b c") and ("a b", "c") apart.
        assert_ne!(
            record_name("a", QUEUE, "bc"),
            record_name("a", "queueb", "c")
        );
        let long = "q".repeat(255);
        assert!(record_name(&long, QUEUE, &long).len() < 255);
    }

    #[test]
    fn claims_cover_every_planned_queue_and_exchange_source_first() {
        let p = plan(true);
        let c = claims(&p);
        assert_eq!(c[0].name, "orders");
        assert_eq!(c[0].role, "source queue");
        assert_eq!(c[0].field, "spec.source.queue");
        assert_eq!(c.len(), p.queues.len() + p.exchanges.len());
        for q in &p.queues {
            assert!(
                c.iter().any(|x| x.kind == QUEUE && x.name == q.name),
                "{}",
                q.name
            );
        }
        let dlx = c
            .iter()
            .find(|x| x.name == p.routes.dead_letter_exchange)
            .expect("dlx claimed");
        assert_eq!(
            (dlx.kind, dlx.field),
            (EXCHANGE, "spec.deadLetter.exchange")
        );
        let timeout = c
            .iter()
            .find(|x| x.name == "orders.dlq.timeout")
            .expect("partition claimed");
        assert_eq!(timeout.role, "dead-letter queue of error class timeout");
        // Dead-letter queues before the exchanges, tiers last.
        let first_tier = c
            .iter()
            .position(|x| x.role.starts_with("retry tier"))
            .expect("tiers");
        let last_dlq = c
            .iter()
            .rposition(|x| x.field == "spec.deadLetter.queue")
            .expect("dlqs");
        assert!(last_dlq < first_tier);
        assert!(c[first_tier..]
            .iter()
            .all(|x| x.role.starts_with("retry tier")));
    }

    #[test]
    fn a_record_round_trips_and_omits_an_empty_retired_list() {
        let p = plan(false);
        let claim = &claims(&p)[0];
        let rec = claim.record(&p);
        let json = serde_json::to_value(&rec).expect("json");
        assert!(json.get("retired").is_none());
        assert_eq!(json["owner"], "default/orders");
        let back: OwnerRecord = serde_json::from_value(json).expect("back");
        assert_eq!(back, rec);
        let other = OwnerRecord {
            owner: "team/other".into(),
            ..rec.clone()
        };
        let msg = conflict_message(&[(claim.clone(), other.clone())]);
        assert!(msg.contains("DeadLetterQueue team/other"), "{msg}");
        assert!(
            msg.contains(&format!(
                "`rabbitmqctl clear_global_parameter {}`",
                rec.parameter()
            )),
            "{msg}"
        );
        // Every name at once, with one command that releases them all.
        let all = claims(&p);
        let second = all[1].record(&p);
        let msg = conflict_message(&[
            (claim.clone(), other.clone()),
            (
                all[1].clone(),
                OwnerRecord {
                    owner: "team/other".into(),
                    ..second.clone()
                },
            ),
        ]);
        assert!(msg.contains("so do 1 more name(s)"), "{msg}");
        assert!(
            msg.contains(&format!("{:?} (its dead-letter queue)", all[1].name)),
            "{msg}"
        );
        assert!(
            msg.contains(&format!(
                "for p in {} {}; do rabbitmqctl clear_global_parameter $p; done",
                rec.parameter(),
                second.parameter()
            )),
            "{msg}"
        );
    }
}
