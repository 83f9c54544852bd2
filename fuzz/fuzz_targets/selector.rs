//! Label selectors from arbitrary JSON: validation never panics, and a valid matchLabels-only
//! selector matches exactly the label sets that contain its labels.
#![no_main]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use libfuzzer_sys::fuzz_target;
use restore_hooks::hooks::selector::Selector;

fuzz_target!(|data: &[u8]| {
    let Ok(selector) = serde_json::from_slice::<LabelSelector>(data) else { return };
    let Ok(compiled) = Selector::compile(Some(&selector)) else { return };
    let labels: BTreeMap<String, String> = selector.match_labels.clone().unwrap_or_default();
    let _ = compiled.matches(&BTreeMap::new());
    if selector.match_expressions.as_ref().is_none_or(|e| e.is_empty()) {
        assert!(compiled.matches(&labels));
        // An extra label the selector does not mention never stops a match. The key must be
        // new: overwriting one of the selector's own labels would (rightly) break the match.
        let extra = (0..).map(|i| format!("zz-extra-{i}")).find(|k| !labels.contains_key(k));
        let mut more = labels.clone();
        more.insert(extra.expect("a free key exists"), "1".into());
        assert!(compiled.matches(&more));
        if let Some((k, _)) = labels.iter().next() {
            let mut fewer = labels.clone();
            fewer.remove(&k.clone());
            assert!(!compiled.matches(&fewer));
        }
    }
});
