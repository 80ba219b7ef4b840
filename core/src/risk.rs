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
/// make it L2; a destructive tool is L5 whatever its action types say. An argv that puts an arg
/// into code a shell or an interpreter runs (`sh -c "ls {{dir}}"`) makes it at least L4: an arg
/// that is code is a command injection waiting for a model to write it.
pub fn descriptor_tier(spec: &ToolDescriptorSpec) -> RiskTier {
    let declared = declared_tier(spec);
    if templated_code(&spec.execution.argv).is_some() {
        // An arg that becomes code can make the tool do anything its sandbox allows.
        return declared.max(RiskTier::L4);
    }
    declared
}

/// The tier the action types and effects alone imply (what the declared risk must match).
pub fn declared_tier(spec: &ToolDescriptorSpec) -> RiskTier {
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

/// Shells: run their argument after a `-c` flag (`-c`, `-ec`, `-lc`) as a command line.
const SHELLS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "busybox",
];

/// Interpreters and the flags after which their next argument is code.
const INTERPRETERS: &[(&str, &[&str])] = &[
    ("python", &["-c"]),
    ("python3", &["-c"]),
    ("node", &["-e", "--eval", "-p", "--print"]),
    ("deno", &["eval"]),
    ("perl", &["-e", "-E"]),
    ("ruby", &["-e"]),
    ("php", &["-r"]),
    ("lua", &["-e"]),
    ("pwsh", &["-c", "-Command"]),
];

/// Where in an argv (template) a shell or an interpreter is given code to run, and the
/// program's name: `[sh, -c, "…"]` is `(2, "sh")`. `env` and its `NAME=value` arguments in front
/// are looked through.
pub fn inline_code(argv: &[String]) -> Option<(usize, String)> {
    let mut at = 0;
    let name = |a: &str| a.rsplit('/').next().unwrap_or(a).to_string();
    if argv.first().is_some_and(|a| name(a) == "env") {
        at = 1;
        while argv
            .get(at)
            .is_some_and(|a| a.contains('=') || a.starts_with('-'))
        {
            at += 1;
        }
    }
    let program = name(argv.get(at)?);
    let stem = program.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    let flag_at = if SHELLS.contains(&program.as_str()) {
        argv.iter()
            .skip(at + 1)
            .position(|a| a.starts_with('-') && !a.starts_with("--") && a.contains('c'))
    } else {
        let flags = INTERPRETERS
            .iter()
            .find(|(p, _)| *p == program || *p == stem)?
            .1;
        argv.iter()
            .skip(at + 1)
            .position(|a| flags.contains(&a.as_str()))
    }?;
    let code = at + 1 + flag_at + 1;
    (code < argv.len()).then_some((code, program))
}

/// Whether `program` (a file name) is a shell.
pub fn is_shell(program: &str) -> bool {
    SHELLS.contains(&program)
}

/// The argv element (index, program) whose code holds a `{{placeholder}}`: an arg would become
/// part of a script.
pub fn templated_code(argv: &[String]) -> Option<(usize, String)> {
    inline_code(argv).filter(|(i, _)| argv[*i].contains("{{"))
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
    fn code_made_of_args_is_found_and_code_alone_is_not() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            templated_code(&v(&["sh", "-c", "{{cmd}}"])),
            Some((2, "sh".into()))
        );
        assert_eq!(
            templated_code(&v(&["/bin/bash", "-ec", "ls {{dir}}"])),
            Some((2, "bash".into()))
        );
        assert_eq!(
            templated_code(&v(&[
                "/usr/bin/env",
                "A=1",
                "python3",
                "-c",
                "print('{{x}}')"
            ])),
            Some((4, "python3".into()))
        );
        assert_eq!(
            templated_code(&v(&["node", "--eval", "{{js}}"])),
            Some((2, "node".into()))
        );
        assert_eq!(
            templated_code(&v(&["python3.12", "-c", "{{x}}"])),
            Some((2, "python3.12".into()))
        );
        // Code without args, or args as their own arguments, is not templated code.
        assert_eq!(templated_code(&v(&["sh", "-c", "exit 3"])), None);
        assert_eq!(
            inline_code(&v(&["sh", "-c", "exit 3"])),
            Some((2, "sh".into()))
        );
        assert_eq!(
            templated_code(&v(&["sh", "-c", "echo \"$1\"", "sh", "{{msg}}"])),
            None
        );
        assert_eq!(templated_code(&v(&["echo", "{{msg}}"])), None);
        assert_eq!(templated_code(&v(&["grep", "-c", "{{pattern}}"])), None);
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
