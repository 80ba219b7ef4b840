//! Grant budgets, counted: a call uses one unit of its grant's budget when it is authorized, and
//! gives it back when it ends before it started (refused on the re-check, its sandbox or
//! credential could not be set up, cancelled while authorized). The ledger lives with the grant
//! (its status on a cluster, the embedded store locally); both runtimes change it only through
//! [`charge`] and [`refund`], atomically with the call's own transition.
//!
//! The rolling hour of `maxCallsPerHour` is counted in one-minute buckets: a unit leaves the
//! window 60 to 61 minutes after it was spent.

use jiff::Timestamp;
use toolgate_crds::{Budget, BudgetCharge, MinuteCount, ToolGrantStatus};

use crate::registry::GrantUsage;

/// Minutes in the rolling window.
pub const WINDOW_MINUTES: i64 = 60;
/// Charges remembered for idempotency (a charge repeated after a restart is not counted again).
pub const RECENT_CHARGES: usize = 1000;

fn minute_of(now: Timestamp) -> i64 {
    now.as_second().div_euclid(60)
}

/// A grant's ledger as of `now`: the usage a decision counts.
pub fn usage(ledger: &ToolGrantStatus, now: Timestamp) -> GrantUsage {
    let current = minute_of(now);
    let window = || {
        ledger
            .hourly
            .iter()
            .filter(move |m| m.minute > current - WINDOW_MINUTES && m.calls > 0)
    };
    GrantUsage {
        calls_total: ledger.calls_used,
        calls_last_hour: window().map(|m| m.calls).sum(),
        window_frees_at: window()
            .map(|m| m.minute)
            .min()
            .and_then(|m| Timestamp::from_second((m + WINDOW_MINUTES) * 60).ok()),
    }
}

/// Which limit of `budget` the usage reached, if one: the refusal a decision and a charge give.
pub fn exhausted(grant: &str, budget: &Budget, used: &GrantUsage) -> Option<Exhausted> {
    if let Some(max) = budget.max_calls
        && used.calls_total >= max
    {
        return Some(Exhausted {
            grant: grant.into(),
            limit: "maxCalls",
            max,
            resets_at: None,
        });
    }
    match budget.max_calls_per_hour {
        Some(max) if used.calls_last_hour >= max => Some(Exhausted {
            grant: grant.into(),
            limit: "maxCallsPerHour",
            max,
            resets_at: used.window_frees_at,
        }),
        _ => None,
    }
}

/// Why a charge was refused: which limit, and when a unit frees up (never, for the lifetime
/// limit).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct Exhausted {
    /// The grant.
    pub grant: String,
    /// `maxCalls` or `maxCallsPerHour`.
    pub limit: &'static str,
    /// The limit's value.
    pub max: u64,
    /// When the oldest unit of the window leaves it (hourly limit only).
    pub resets_at: Option<Timestamp>,
}

impl Exhausted {
    fn describe(&self) -> String {
        match self.resets_at {
            Some(t) => format!(
                "grant {} used its {} calls of the last hour (budget.{}); the next unit frees up at {t}",
                self.grant, self.max, self.limit
            ),
            None => format!(
                "grant {} used its {} calls (budget.{}); raise the limit or use another grant",
                self.grant, self.max, self.limit
            ),
        }
    }
}

/// Use one unit of a grant's budget for `call` at `now`, or refuse. A call already charged is
/// not charged again (so a transition retried after a crash spends nothing twice).
pub fn charge(
    ledger: &mut ToolGrantStatus,
    grant: &str,
    budget: Option<&Budget>,
    call: &str,
    now: Timestamp,
) -> Result<(), Exhausted> {
    if ledger.recent_charges.iter().any(|c| c.call == call) {
        return Ok(());
    }
    prune(ledger, now);
    if let Some(e) = budget.and_then(|b| exhausted(grant, b, &usage(ledger, now))) {
        return Err(e);
    }
    let minute = minute_of(now);
    ledger.calls_used += 1;
    match ledger.hourly.last_mut() {
        Some(m) if m.minute == minute => m.calls += 1,
        _ => ledger.hourly.push(MinuteCount { minute, calls: 1 }),
    }
    ledger.recent_charges.push(BudgetCharge {
        call: call.into(),
        minute,
    });
    if ledger.recent_charges.len() > RECENT_CHARGES {
        let extra = ledger.recent_charges.len() - RECENT_CHARGES;
        ledger.recent_charges.drain(..extra);
    }
    Ok(())
}

/// Give back the unit `call` used (it ended before it started). False when the call was not
/// charged, or its charge is too old to find (then nothing changes).
pub fn refund(ledger: &mut ToolGrantStatus, call: &str, now: Timestamp) -> bool {
    let Some(i) = ledger.recent_charges.iter().position(|c| c.call == call) else {
        return false;
    };
    let charged = ledger.recent_charges.remove(i);
    ledger.calls_used = ledger.calls_used.saturating_sub(1);
    if let Some(m) = ledger
        .hourly
        .iter_mut()
        .find(|m| m.minute == charged.minute)
    {
        m.calls = m.calls.saturating_sub(1);
    }
    prune(ledger, now);
    true
}

/// Drop the minutes that left the window.
fn prune(ledger: &mut ToolGrantStatus, now: Timestamp) {
    let current = minute_of(now);
    ledger
        .hourly
        .retain(|m| m.minute > current - WINDOW_MINUTES && m.calls > 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(minutes: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + minutes * 60).expect("time")
    }

    fn budget(total: Option<u64>, hourly: Option<u64>) -> Budget {
        Budget {
            max_calls: total,
            max_calls_per_hour: hourly,
        }
    }

    #[test]
    fn the_lifetime_limit_counts_every_call_once() {
        let mut l = ToolGrantStatus::default();
        let b = budget(Some(2), None);
        charge(&mut l, "g", Some(&b), "a", at(0)).expect("1");
        charge(&mut l, "g", Some(&b), "a", at(0)).expect("the same call again is free");
        charge(&mut l, "g", Some(&b), "b", at(1)).expect("2");
        let e = charge(&mut l, "g", Some(&b), "c", at(2)).expect_err("exhausted");
        assert_eq!((e.limit, e.max, e.resets_at), ("maxCalls", 2, None));
        assert!(e.to_string().contains("used its 2 calls"), "{e}");
        assert_eq!(l.calls_used, 2);
        assert!(refund(&mut l, "b", at(3)));
        assert!(!refund(&mut l, "b", at(3)), "a refund happens once");
        charge(&mut l, "g", Some(&b), "c", at(3)).expect("the unit came back");
    }

    #[test]
    fn the_hourly_window_rolls() {
        let mut l = ToolGrantStatus::default();
        let b = budget(None, Some(3));
        charge(&mut l, "g", Some(&b), "a", at(0)).expect("1");
        charge(&mut l, "g", Some(&b), "b", at(10)).expect("2");
        charge(&mut l, "g", Some(&b), "c", at(59)).expect("3");
        let e = charge(&mut l, "g", Some(&b), "d", at(59)).expect_err("full hour");
        assert_eq!(e.limit, "maxCallsPerHour");
        assert_eq!(
            e.resets_at,
            Some(at(60)),
            "the unit of minute 0 leaves at minute 60"
        );
        charge(&mut l, "g", Some(&b), "d", at(60)).expect("minute 0 left the window");
        assert_eq!(usage(&l, at(60)).calls_last_hour, 3);
        assert_eq!(usage(&l, at(200)).calls_last_hour, 0);
        assert_eq!(l.calls_used, 4);
        // Without a budget nothing is refused, but the calls are still counted.
        let mut free = ToolGrantStatus::default();
        for i in 0..5 {
            charge(&mut free, "g", None, &format!("c{i}"), at(0)).expect("no budget");
        }
        assert_eq!(free.calls_used, 5);
    }

    #[test]
    fn the_ledger_stays_bounded() {
        let mut l = ToolGrantStatus::default();
        for i in 0..(RECENT_CHARGES as i64 + 500) {
            charge(&mut l, "g", None, &format!("c{i}"), at(i)).expect("charge");
        }
        assert_eq!(l.recent_charges.len(), RECENT_CHARGES);
        assert!(l.hourly.len() <= WINDOW_MINUTES as usize);
    }
}
