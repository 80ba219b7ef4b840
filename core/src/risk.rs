//! The permission tier (L0–L5) of a tool, from its action types and declared effects.

use toolgate_crds::{ActionType, RiskSeverity, RiskTier, ToolDescriptorSpec};

/// The tier an action type alone implies.
pub fn action_tier(action: ActionType) -> RiskTier {
    use ActionType::*;
    match action {
        Read | Search | Inspect | MemoryRead => RiskTier::L0,
        Compute | Transform | Generate | Execute | SubagentDelegate => RiskTier::L1,
        Write | Patch | MemoryWrite => RiskTier::L2,
        ExternalSend => RiskTier::L4,
        Deploy | Purchase | Delete | Admin | Auth => RiskTier::L5,
    }
}

/// The tier of a descriptor: the highest of its action types and its declared effects.
///
/// Effects raise the tier: external calls make a reader L3 and a mutator L4; workspace writes
/// make it L2; a destructive tool is L5 whatever its action types say.
pub fn descriptor_tier(spec: &ToolDescriptorSpec) -> RiskTier {
    let mut tier = spec
        .intent
        .action_types
        .iter()
        .map(|a| action_tier(*a))
        .max()
        .unwrap_or(RiskTier::L0);
    let e = &spec.effects;
    if !e.writes.is_empty() || e.mutates_state {
        tier = tier.max(RiskTier::L2);
    }
    if e.external_calls || e.sends_user_data {
        tier = tier.max(RiskTier::L3);
        if e.mutates_state || e.sends_user_data {
            tier = tier.max(RiskTier::L4);
        }
    }
    if spec.risk.destructive || !e.deletes.is_empty() {
        tier = tier.max(RiskTier::L5);
    }
    tier
}

/// The lowest declared severity that is honest for a tier.
pub fn minimum_severity(tier: RiskTier) -> RiskSeverity {
    match tier {
        RiskTier::L0 | RiskTier::L1 => RiskSeverity::Low,
        RiskTier::L2 | RiskTier::L3 => RiskSeverity::Medium,
        RiskTier::L4 | RiskTier::L5 => RiskSeverity::High,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_tiers_follow_the_design_table() {
        assert_eq!(action_tier(ActionType::Read), RiskTier::L0);
        assert_eq!(action_tier(ActionType::Compute), RiskTier::L1);
        assert_eq!(action_tier(ActionType::Write), RiskTier::L2);
        assert_eq!(action_tier(ActionType::ExternalSend), RiskTier::L4);
        for a in [
            ActionType::Delete,
            ActionType::Deploy,
            ActionType::Purchase,
            ActionType::Admin,
        ] {
            assert_eq!(action_tier(a), RiskTier::L5, "{a}");
        }
    }

    #[test]
    fn minimum_severity_is_monotonic() {
        let tiers = [
            RiskTier::L0,
            RiskTier::L1,
            RiskTier::L2,
            RiskTier::L3,
            RiskTier::L4,
            RiskTier::L5,
        ];
        for w in tiers.windows(2) {
            assert!(minimum_severity(w[0]) <= minimum_severity(w[1]));
        }
    }
}
