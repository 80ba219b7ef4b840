//! Keeping the result inside the 4 KiB termination message: the preview is cut first, then the
//! structured output, then messages and effect lists; artifact references are never cut.

use toolgate_contract::exec::MAX_RESULT_BYTES;
use toolgate_crds::CallResult;

fn size(r: &CallResult) -> usize {
    serde_json::to_vec(r).map_or(usize::MAX, |v| v.len())
}

pub use toolgate_contract::text::cut;

/// Shrink a result until it serializes within [`MAX_RESULT_BYTES`].
pub fn bound(mut r: CallResult) -> CallResult {
    if size(&r) <= MAX_RESULT_BYTES {
        return r;
    }
    if let Some(p) = r.output_preview.take() {
        // Binary search the longest preview that fits.
        let (mut lo, mut hi) = (0usize, p.len());
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            r.output_preview = Some(cut(&p, mid));
            if size(&r) <= MAX_RESULT_BYTES {
                lo = mid
            } else {
                hi = mid - 1
            }
        }
        r.output_preview = (lo > 0).then(|| cut(&p, lo));
        if size(&r) <= MAX_RESULT_BYTES {
            return r;
        }
    }
    if r.structured_output.take().is_some() && size(&r) <= MAX_RESULT_BYTES {
        return r;
    }
    if let Some(e) = r.error.as_mut() {
        e.message = cut(&e.message, 256);
    }
    if let Some(v) = r.verifier.as_mut() {
        for c in &mut v.checks {
            c.message = c.message.as_deref().map(|m| cut(m, 128));
        }
    }
    if let Some(e) = r.effects_observed.as_mut() {
        for list in [
            &mut e.writes,
            &mut e.deletes,
            &mut e.reads,
            &mut e.external_calls,
        ] {
            if list.len() > 8 {
                let more = list.len() - 8;
                list.truncate(8);
                list.push(format!("… and {more} more (see the diff artifact)"));
            }
            for item in list.iter_mut() {
                *item = cut(item, 160);
            }
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_crds::ResultStatus;

    #[test]
    fn previews_are_cut_to_fit_on_char_boundaries() {
        let r = CallResult {
            status: ResultStatus::Success,
            exit_code: Some(0),
            output_preview: Some("é".repeat(5000)),
            structured_output: None,
            artifacts: vec![],
            effects_observed: None,
            verifier: None,
            error: None,
            usage: None,
        };
        let b = bound(r);
        assert!(serde_json::to_vec(&b).unwrap().len() <= MAX_RESULT_BYTES);
        assert!(b.output_preview.unwrap().ends_with('…'));
    }
}
