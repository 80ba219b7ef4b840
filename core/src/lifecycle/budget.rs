//! What a transition does to a grant's budget: the transition that authorizes a call uses one
//! unit of its grant's budget, one that ends a charged call before it started gives it back.
//! The runtime loads the grant's ledger, applies this, and persists both atomically.

use jiff::Timestamp;
use toolgate_crds::conditions::{STARTED, STATE_UPDATED, reason};
use toolgate_crds::{
    Budget, CallPhase, ConditionStatus, LocalObjectRef, ToolCallStatus, ToolGrantStatus,
};

use super::step::{Step, is_terminal};
use crate::budget::{charge, refund};

/// What the steps about to be recorded do to a budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BudgetMove {
    /// The call is being authorized under this grant: charge it.
    Charge(String),
    /// The call ends before it started: give the unit back to this grant.
    Refund(String),
    /// Nothing to count.
    Nothing,
}

/// The budget move of recording `steps` on a call whose status (decision included) is `status`.
pub fn budget_move(status: &ToolCallStatus, steps: &[Step]) -> BudgetMove {
    let Some(next) = steps.iter().rev().find_map(|s| s.phase) else {
        return BudgetMove::Nothing;
    };
    if next == CallPhase::Authorized && status.budget_charged.is_none() {
        return match status
            .authorization
            .as_ref()
            .and_then(|a| a.grant_ref.as_ref())
        {
            Some(g) => BudgetMove::Charge(g.name.clone()),
            None => BudgetMove::Nothing,
        };
    }
    let started = |s: &Step| s.kind == STARTED && s.status == ConditionStatus::True;
    let ran = steps.iter().any(started)
        || status
            .conditions
            .iter()
            .any(|c| c.type_ == STARTED && c.status == ConditionStatus::True);
    match &status.budget_charged {
        Some(g) if is_terminal(Some(next)) && !ran => BudgetMove::Refund(g.name.clone()),
        _ => BudgetMove::Nothing,
    }
}

impl BudgetMove {
    /// The grant whose ledger the move changes.
    pub fn grant(&self) -> Option<&str> {
        match self {
            BudgetMove::Charge(g) | BudgetMove::Refund(g) => Some(g),
            BudgetMove::Nothing => None,
        }
    }
}

/// Apply a budget move to its grant's ledger (`budget`: the grant's limits): a charge, or —
/// budget exhausted — the authorizing step replaced by the refusal; or the unit given back. The
/// ledger names a call `namespace/name` on both runtimes. The runtime reads the ledger before
/// and writes it with the call's steps.
pub fn settle(
    movement: &BudgetMove,
    call: &super::Call<'_>,
    steps: &mut Vec<Step>,
    status: &mut ToolCallStatus,
    budget: Option<&Budget>,
    ledger: &mut ToolGrantStatus,
    now: Timestamp,
) {
    let key = format!("{}/{}", call.namespace, call.name);
    match movement {
        BudgetMove::Charge(grant) => {
            charge_or_refuse(steps, status, grant, budget, ledger, &key, now)
        }
        BudgetMove::Refund(_) => give_back(status, ledger, &key, now),
        BudgetMove::Nothing => {}
    }
}

/// Charge `grant` for the call `call_key`: the status records the charge, or — budget
/// exhausted — the authorizing step is replaced by the refusal, which says which limit and when
/// it frees up.
fn charge_or_refuse(
    steps: &mut Vec<Step>,
    status: &mut ToolCallStatus,
    grant: &str,
    budget: Option<&Budget>,
    ledger: &mut ToolGrantStatus,
    call_key: &str,
    now: Timestamp,
) {
    match charge(ledger, grant, budget, call_key, now) {
        Ok(()) => {
            status.budget_charged = Some(LocalObjectRef { name: grant.into() });
        }
        Err(exhausted) => {
            let Some(i) = steps
                .iter()
                .rposition(|s| s.phase == Some(CallPhase::Authorized))
            else {
                return;
            };
            let kind = steps[i].kind;
            steps.truncate(i);
            steps.push(
                Step::failed(kind, reason::BUDGET_EXHAUSTED, exhausted.to_string())
                    .then(CallPhase::Denied),
            );
            steps.push(
                Step::failed(
                    STATE_UPDATED,
                    reason::DENIED,
                    "the call ended without running",
                )
                .then(CallPhase::Denied),
            );
        }
    }
}

/// Give the call's unit back to `grant` and forget the charge.
fn give_back(
    status: &mut ToolCallStatus,
    ledger: &mut ToolGrantStatus,
    call_key: &str,
    now: Timestamp,
) {
    refund(ledger, call_key, now);
    status.budget_charged = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_crds::conditions::{POLICY_CHECKED, reason as r};

    fn authorized_by(grant: &str) -> ToolCallStatus {
        serde_json::from_value(serde_json::json!({
            "authorization": {"decision": "allow", "riskTier": "L1", "riskLevel": "low",
                              "grantRef": {"name": grant}}
        }))
        .expect("status")
    }

    #[test]
    fn authorizing_charges_and_ending_unstarted_refunds() {
        let mut status = authorized_by("g");
        let allow = vec![Step::ok(POLICY_CHECKED, r::ALLOWED, "ok").then(CallPhase::Authorized)];
        assert_eq!(budget_move(&status, &allow), BudgetMove::Charge("g".into()));
        let mut ledger = ToolGrantStatus::default();
        let mut steps = allow.clone();
        let b = Budget {
            max_calls: Some(1),
            max_calls_per_hour: None,
        };
        charge_or_refuse(
            &mut steps,
            &mut status,
            "g",
            Some(&b),
            &mut ledger,
            "c1",
            Timestamp::now(),
        );
        assert_eq!(steps, allow, "charged: the steps stand");
        assert_eq!(ledger.calls_used, 1);
        // Refused on the re-check before it ran: the unit comes back.
        let end = super::super::cannot_run(
            toolgate_crds::conditions::SANDBOX_PREPARED,
            r::SANDBOX_REFUSED,
            "no",
        );
        assert_eq!(budget_move(&status, &end), BudgetMove::Refund("g".into()));
        give_back(&mut status, &mut ledger, "c1", Timestamp::now());
        assert_eq!(
            (ledger.calls_used, status.budget_charged.clone()),
            (0, None)
        );
        // A call that started keeps its unit even when it fails.
        let mut ran = authorized_by("g");
        ran.budget_charged = Some(LocalObjectRef { name: "g".into() });
        let steps = vec![Step::ok(STARTED, r::EXECUTOR_STARTED, "go").then(CallPhase::Running)];
        assert_eq!(budget_move(&ran, &steps), BudgetMove::Nothing);
    }

    #[test]
    fn an_exhausted_budget_denies_instead_of_authorizing() {
        let mut status = authorized_by("g");
        let mut ledger = ToolGrantStatus::default();
        let b = Budget {
            max_calls: Some(0),
            max_calls_per_hour: None,
        };
        let mut steps =
            vec![Step::ok(POLICY_CHECKED, r::ALLOWED, "ok").then(CallPhase::Authorized)];
        charge_or_refuse(
            &mut steps,
            &mut status,
            "g",
            Some(&b),
            &mut ledger,
            "c1",
            Timestamp::now(),
        );
        let kinds: Vec<(&str, &str)> = steps.iter().map(|s| (s.kind, s.reason.as_str())).collect();
        assert_eq!(
            kinds,
            [
                (POLICY_CHECKED, r::BUDGET_EXHAUSTED),
                (STATE_UPDATED, r::DENIED)
            ]
        );
        assert!(
            steps[0].message.contains("budget.maxCalls"),
            "{}",
            steps[0].message
        );
        assert_eq!(status.budget_charged, None);
    }
}
