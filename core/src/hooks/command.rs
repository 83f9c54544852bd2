//! Velero's command rule for hook annotations, with one deliberate deviation (docs/behaviour.md §2.2):
//! a value starting with `[` must be a JSON array of strings. Velero falls back to using the raw
//! string as the whole command, which turns a typo into a hook that can never work.

/// A command annotation starting with `[` that is not a JSON array of strings (docs/behaviour.md
/// §2.2, §3.4 row 1); its message tells the operator how to write one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "command {value:?} starts with '[' but is not a JSON array of strings ({reason}); write it as [\"/bin/sh\", \"-c\", \"...\"]"
)]
pub struct CommandError {
    /// The annotation value as written.
    pub value: String,
    /// Why JSON parsing failed (serde_json's message).
    pub reason: String,
}

/// Parses a command annotation into argv.
///
/// - first character `[`: a JSON array of strings (`[]` is an empty command);
/// - anything else: a single argv element, no splitting and no shell (so `/bin/restore --full`
///   runs a program literally named that, exactly as Velero does);
/// - empty: an empty command.
pub fn parse_command(value: &str) -> Result<Vec<String>, CommandError> {
    if value.is_empty() {
        return Ok(Vec::new());
    }
    if value.starts_with('[') {
        return serde_json::from_str::<Vec<String>>(value).map_err(|e| CommandError {
            value: value.to_string(),
            reason: e.to_string(),
        });
    }
    Ok(vec![value.to_string()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_rule() {
        let ok: &[(&str, &[&str])] = &[
            ("", &[]),
            ("[]", &[]),
            ("/bin/true", &["/bin/true"]),
            (
                "/usr/bin/populate /data full",
                &["/usr/bin/populate /data full"],
            ),
            (
                r#"["/bin/sh","-c","echo hi"]"#,
                &["/bin/sh", "-c", "echo hi"],
            ),
            (
                r#"[ "/bin/ash", "-c", "date" ]"#,
                &["/bin/ash", "-c", "date"],
            ),
            (r#"["a\"b", "ü", "\u00e9"]"#, &["a\"b", "ü", "é"]),
            // Leading whitespace disables JSON parsing, as in Velero.
            (r#" ["a"]"#, &[r#" ["a"]"#]),
            ("echo [x]", &["echo [x]"]),
        ];
        for (input, want) in ok {
            let got = parse_command(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(got, *want, "input {input:?}");
        }
        for bad in [
            "[",
            "[/bin/sh -c date]",
            r#"["a", 1]"#,
            r#"["a",]"#,
            r#"["a"] trailing"#,
            r#"[{"a":1}]"#,
            "[null]",
        ] {
            let err = parse_command(bad).expect_err(bad);
            assert!(err.to_string().contains("JSON array of strings"), "{err}");
        }
    }
}
