//! Text rules of the conversion: commands that must run exactly as Velero ran them although hook
//! objects expand `$(NAME)` parameters (docs/behaviour.md §2.8), and the names of written objects.

use std::borrow::Cow;

use ring::digest::{SHA256, digest};

use crate::hooks::parameters::NAMES;

/// `text` written so that Kubernetes' `$(VAR)` expansion (what restore-hooks applies to the exec
/// commands of hook objects at admission) gives back `text` itself, whatever is defined: each `$`
/// followed by `$` or `(` is doubled. Velero never expands its commands; a `$$` (a shell's PID)
/// or a literal `$(POD_NAME)` must stay as written once the hook is a hook object's.
pub fn escape_expansion(text: &str) -> Cow<'_, str> {
    let needs = |at: usize| matches!(text.as_bytes().get(at + 1), Some(b'$' | b'('));
    if !text.bytes().enumerate().any(|(i, b)| b == b'$' && needs(i)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for (i, c) in text.char_indices() {
        out.push(c);
        if c == '$' && needs(i) {
            out.push('$');
        }
    }
    Cow::Owned(out)
}

/// `text` (an init container's `command`, `args` or `env` value) with each reference to a
/// restore parameter (`$(RESTORE_NAME)`, ...) that `defined` does not define escaped as `$$(NAME)`.
///
/// The kubelet expands `$(VAR)` in init containers from their own `env`, Velero's as much as any,
/// so everything else must stay as it is. What differs once the container is a hook object's is
/// that restore-hooks gives it an env entry for each parameter it references and does not define
/// (docs/behaviour.md §2.8): in Velero's container such a reference stayed literal, and
/// `$$(NAME)` keeps it literal (the kubelet turns `$$` into `$`, and restore-hooks sees no
/// reference in it).
pub fn escape_parameter_references<'t>(
    text: &'t str,
    defined: &dyn Fn(&str) -> bool,
) -> Cow<'t, str> {
    let mut out = String::new();
    let mut copied = 0;
    let mut rest = 0;
    // The scan of `parameters::expand`: `$$` is one token, `$(NAME)` another.
    while let Some(at) = text[rest..].find('$').map(|i| rest + i) {
        match text.as_bytes().get(at + 1) {
            Some(b'$') => rest = at + 2,
            Some(b'(') => match text[at + 2..].find(')').map(|i| at + 2 + i) {
                Some(close) => {
                    let name = &text[at + 2..close];
                    if NAMES.contains(&name) && !defined(name) {
                        out.push_str(&text[copied..at]);
                        out.push('$');
                        copied = at;
                    }
                    rest = close + 1;
                }
                None => break,
            },
            _ => rest = at + 1,
        }
    }
    if out.is_empty() {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// Longest object name (an RFC 1123 subdomain).
const MAX_NAME: usize = 253;

/// A hook object's name from `parts`, joined by `-`: each part reduced to lowercase letters,
/// digits and single dashes, and the whole cut to 253 characters with the first 6 hex digits of
/// its SHA-256 at the end when longer (the way Velero shortens long names), so that it is always
/// a valid name and two long sources rarely meet.
pub fn object_name(parts: &[&str]) -> String {
    let mut name = String::new();
    for part in parts {
        let mut piece = String::new();
        for c in part.chars() {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                piece.push(c);
            } else if !piece.is_empty() && !piece.ends_with('-') {
                piece.push('-');
            }
        }
        let piece = piece.trim_end_matches('-');
        if !piece.is_empty() {
            if !name.is_empty() {
                name.push('-');
            }
            name.push_str(piece);
        }
    }
    if name.len() <= MAX_NAME {
        return name;
    }
    let hash = digest(&SHA256, name.as_bytes());
    let hex = crate::hex::lower_hex(&hash.as_ref()[..3]);
    let kept = name[..MAX_NAME - 7].trim_end_matches('-');
    format!("{kept}-{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::parameters::expand;

    #[test]
    fn escaped_commands_expand_to_themselves() {
        let all = |name: &str| -> Option<&'static str> {
            Some(match name {
                "RESTORE_NAME" => "r1",
                "POD_NAME" => "db-0",
                "HOME" => "/root",
                _ => "v",
            })
        };
        for text in [
            "",
            "plain",
            "$",
            "$$",
            "$$$",
            "echo $$",
            "$(POD_NAME)",
            "$$(POD_NAME)",
            "$((1+2))",
            "$(unclosed",
            "a$b$(c)$$d$",
            "${HOME} $HOME $(HOME)",
            "ü$(RESTORE_NAME)é$",
            "$)$(",
        ] {
            let escaped = escape_expansion(text);
            assert_eq!(
                expand(&escaped, all),
                text,
                "{text:?} escaped as {escaped:?}"
            );
            assert_eq!(expand(&escaped, |_| None), text, "{text:?}");
        }
        assert!(matches!(escape_expansion("echo $HOME"), Cow::Borrowed(_)));
        assert_eq!(escape_expansion("echo $$"), "echo $$$");
        assert_eq!(escape_expansion("$(POD_NAME)"), "$$(POD_NAME)");
    }

    #[test]
    fn only_undefined_parameter_references_are_escaped() {
        let defines_namespace = |name: &str| name == "NAMESPACE";
        for (text, want) in [
            ("echo $(POD_NAME)", "echo $$(POD_NAME)"),
            (
                "$(NAMESPACE)/$(RESTORE_NAME)",
                "$(NAMESPACE)/$$(RESTORE_NAME)",
            ),
            ("$(OTHER) $$ $HOME", "$(OTHER) $$ $HOME"),
            ("$$(POD_NAME)", "$$(POD_NAME)"),
            (
                "$(POD_ORDINAL)$(POD_ORDINAL)",
                "$$(POD_ORDINAL)$$(POD_ORDINAL)",
            ),
            ("$(POD_NAME", "$(POD_NAME"),
        ] {
            assert_eq!(
                escape_parameter_references(text, &defines_namespace),
                want,
                "{text:?}"
            );
            // restore-hooks then finds no reference to provide, so the kubelet sees the text as
            // written, and expands it as it would have in Velero's container.
            let escaped = escape_parameter_references(text, &defines_namespace);
            for name in NAMES.into_iter().filter(|n| !defines_namespace(n)) {
                assert!(
                    !crate::hooks::parameters::references(&escaped, name),
                    "{escaped:?} references {name}"
                );
            }
        }
    }

    #[test]
    fn names_are_valid_object_names() {
        for (parts, want) in [
            (&["velero", "deployment", "db"][..], "velero-deployment-db"),
            (
                &["velero-restore", "r2", "0", "Restore Hook_1!"],
                "velero-restore-r2-0-restore-hook-1",
            ),
            (
                &["velero", "statefulset", "my.db"],
                "velero-statefulset-my-db",
            ),
            (&["x", "", "--"], "x"),
        ] {
            assert_eq!(object_name(parts), want);
        }
        let long = "a".repeat(300);
        let name = object_name(&["velero", "deployment", &long]);
        assert_eq!(name.len(), 253);
        assert!(crate::hooks::compiled::is_dns_label(
            &name[name.len() - 6..]
        ));
        assert_ne!(
            name,
            object_name(&["velero", "deployment", &"a".repeat(301)])
        );
    }
}
