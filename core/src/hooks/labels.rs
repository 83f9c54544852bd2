//! Reading labels, whichever way they are kept. The rules (selectors, restore scope, ordinals)
//! only ever look a label up, so they take any [`LabelLookup`]: the webhook's map of one request,
//! or the [`CompactLabels`] the controller keeps for each pod while it waits (a restore can have
//! thousands of pods waiting, and a `BTreeMap` of a few labels allocates room for eleven).

use std::collections::BTreeMap;

/// Read access to a pod's or a namespace's labels.
pub trait LabelLookup {
    /// The value of label `key`, when set.
    fn label(&self, key: &str) -> Option<&str>;
}

impl LabelLookup for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// Labels in one buffer, sorted by key: two allocations whatever their number.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompactLabels {
    /// Each label's key then its value, in key order, without separators.
    text: Box<str>,
    /// Where each label's key and its value end in `text`; a key starts where the value before
    /// it ends.
    ends: Box<[(u32, u32)]>,
}

impl CompactLabels {
    /// The key of the label at position `at`.
    fn key(&self, at: usize) -> &str {
        let start = at.checked_sub(1).map_or(0, |b| self.ends[b].1 as usize);
        &self.text[start..self.ends[at].0 as usize]
    }

    /// The value of the label at position `at`.
    fn value(&self, at: usize) -> &str {
        let (key_end, value_end) = self.ends[at];
        &self.text[key_end as usize..value_end as usize]
    }
}

impl LabelLookup for CompactLabels {
    fn label(&self, key: &str) -> Option<&str> {
        // A binary search over positions: the keys are not a slice of their own.
        let (mut low, mut high) = (0, self.ends.len());
        while low < high {
            let mid = low + (high - low) / 2;
            match self.key(mid).cmp(key) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => return Some(self.value(mid)),
            }
        }
        None
    }
}

impl From<&BTreeMap<String, String>> for CompactLabels {
    fn from(map: &BTreeMap<String, String>) -> Self {
        let mut text = String::with_capacity(map.iter().map(|(k, v)| k.len() + v.len()).sum());
        let ends = map
            .iter()
            .map(|(k, v)| {
                text.push_str(k);
                let key_end = text.len();
                text.push_str(v);
                // Kubernetes caps an object's labels far below 4 GiB.
                (key_end as u32, text.len() as u32)
            })
            .collect();
        Self {
            text: text.into_boxed_str(),
            ends,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_labels_answer_as_the_map_does() {
        let cases: [&[(&str, &str)]; 4] = [
            &[],
            &[("app", "db")],
            &[
                ("app", ""),
                ("", "empty-key"),
                ("velero.io/restore-name", "r1"),
            ],
            &[("b", "2"), ("a", "1"), ("c", "3"), ("ab", "12")],
        ];
        for pairs in cases {
            let map: BTreeMap<String, String> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let compact = CompactLabels::from(&map);
            // Every label, in key order, and no other.
            let kept: Vec<(&str, &str)> = (0..compact.ends.len())
                .map(|at| (compact.key(at), compact.value(at)))
                .collect();
            let want: Vec<(&str, &str)> =
                map.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            assert_eq!(kept, want, "{pairs:?}");
            for key in [
                "",
                "a",
                "ab",
                "b",
                "c",
                "d",
                "app",
                "velero.io/restore-name",
                "z",
            ] {
                assert_eq!(compact.label(key), map.label(key), "{key:?} in {pairs:?}");
            }
        }
    }
}
