//! Restore names as Velero writes them into labels (docs/behaviour.md §1.2).
//!
//! A label value is at most 63 characters, restore names are not: Velero's `label.GetValidName`
//! keeps the first 57 characters and appends the first 6 hex digits of the SHA-256 of the full
//! name. Schedules (`<schedule>-<timestamp>`) produce such names routinely, so a pod's
//! `velero.io/restore-name` label must be matched to its Restore by that rule too.

use std::borrow::Cow;

use ring::digest::{SHA256, digest};

/// Longest label value (DNS-1035 label length, as Velero checks it).
pub const MAX_LABEL_VALUE: usize = 63;
const KEPT: usize = MAX_LABEL_VALUE - 6;

/// The value Velero writes into a label for `name`: `name` itself when it fits.
pub fn velero_label_value(name: &str) -> Cow<'_, str> {
    if name.len() <= MAX_LABEL_VALUE {
        return Cow::Borrowed(name);
    }
    let hash = digest(&SHA256, name.as_bytes());
    let hex = crate::hex::lower_hex(&hash.as_ref()[..3]);
    // Velero slices bytes; a non-ASCII name cannot be a Restore name (it is a DNS subdomain),
    // but never panic on one: cut at the last character boundary at or before 57.
    let mut end = KEPT;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}{hex}", &name[..end]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_cut_and_hashed_like_velero() {
        let seventy = "nightly-schedule-for-the-payments-database-cluster-20261203101500-abcd";
        assert_eq!(seventy.len(), 70);
        let label = velero_label_value(seventy);
        assert_eq!(label.len(), 63);
        assert!(label.starts_with(&seventy[..57]));
        // echo -n "$name" | sha256sum | cut -c1-6
        let want = {
            let d = digest(&SHA256, seventy.as_bytes());
            format!(
                "{:02x}{:02x}{:02x}",
                d.as_ref()[0],
                d.as_ref()[1],
                d.as_ref()[2]
            )
        };
        assert_eq!(&label[57..], want);
        // The hash tells two names with the same first 63 characters apart.
        assert_ne!(label, &seventy[..63]);

        let cases = [
            ("", ""),
            ("nightly-1", "nightly-1"),
            (&"a".repeat(63), &"a".repeat(63)),
        ];
        for (name, want) in cases {
            // Names that fit are their own label value.
            assert_eq!(velero_label_value(name), want);
        }
        // Known vector: SHA-256("a" * 64) starts with ffe054.
        assert_eq!(
            velero_label_value(&"a".repeat(64)),
            format!("{}ffe054", "a".repeat(57))
        );
    }
}
