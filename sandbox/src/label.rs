//! Sandbox labels: unique per sandbox, and naming the runtime process that made it, so what a
//! dead runtime left (cgroups, write layers) can be found and swept.

/// A sandbox's label, unique per sandbox even for the same label at once (retries, tests in
/// parallel), in the characters a cgroup name takes.
pub(crate) fn unique(label: &str) -> String {
    static SEQUENCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let label: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!(
        "{label}-{}-{}",
        std::process::id(),
        SEQUENCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// The runtime process a sandbox cgroup's name (`toolgate-<label>-<pid>-<sequence>`) says made it.
pub(crate) fn maker_of(name: &str) -> Option<i32> {
    let rest = name.strip_prefix("toolgate-")?;
    let mut parts = rest.rsplitn(3, '-');
    let (_sequence, pid) = (parts.next()?.parse::<u64>().ok()?, parts.next()?);
    parts.next()?;
    pid.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::maker_of;

    #[test]
    fn a_sandbox_cgroup_names_the_runtime_that_made_it() {
        assert_eq!(maker_of("toolgate-warm-4307-3"), Some(4307));
        assert_eq!(maker_of("toolgate-escape-test-12-0"), Some(12));
        assert_eq!(maker_of("toolgate-call-1-2"), Some(1));
        for other in [
            "toolgate-warm",
            "toolgate-4307-3",
            "warm-4307-3",
            "toolgate-warm-x-3",
            "toolgate-warm-4307-y",
            "",
        ] {
            assert_eq!(maker_of(other), None, "{other:?}");
        }
    }
}
