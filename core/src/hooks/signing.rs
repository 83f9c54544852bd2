//! Signed plans and statuses (docs/behaviour.md §9).
//!
//! The controller execs whatever a plan says, so it must only run plans this installation's
//! webhook issued for that pod. Anyone who may `patch pods` can write annotations; nobody without
//! the installation's key can write a valid HMAC-SHA256 over them. The signature binds the plan's
//! exact bytes to the pod's namespace, name (empty at admission for `generateName` pods) and
//! `generateName`; the plan itself carries `issuedAt`, which the controller compares with the
//! pod's `creationTimestamp`, so a plan copied onto another pod does not verify.
//!
//! The status the controller writes is signed too, bound to the pod's uid, so that an edited
//! status (a finished hook set back to Pending) is detected instead of trusted.
//!
//! Keys rotate: `current` signs, `current` and `previous` verify, so plans issued just before a
//! rotation still run. A signature names its key by id (the first 8 hex digits of the key's
//! SHA-256), so verification needs no trial and an operator can tell which key signed a plan.

use std::fmt;

use ring::digest::{SHA256, digest};
use ring::hmac;

use crate::hex::lower_hex;

/// Annotation holding the plan's signature: `v1.<key id>.<hex MAC>`.
pub const PLAN_SIGNATURE_ANNOTATION: &str = "restore-hooks.dev/plan-signature";
/// Annotation holding the status' signature, same format.
pub const STATUS_SIGNATURE_ANNOTATION: &str = "restore-hooks.dev/status-signature";

/// Shortest key accepted: HMAC-SHA256 with less than 32 bytes of key is weaker than its output.
pub const MIN_KEY_BYTES: usize = 32;

const VERSION: &str = "v1";

/// A plan key (from the plan-key Secret or `--plan-key-file`) too weak to sign with
/// (docs/behaviour.md §9.2).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error(
        "plan key {which} is {len} bytes; at least {MIN_KEY_BYTES} random bytes are needed \
         (e.g. `head -c 32 /dev/urandom`)"
    )]
    /// Shorter than [`MIN_KEY_BYTES`].
    TooShort {
        /// Which key: `current` or `previous`.
        which: &'static str,
        /// Its length in bytes.
        len: usize,
    },
}

/// Why a signature did not verify. Each message says what an operator sees and why nothing ran.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("it carries no {0} annotation: it was not issued by this installation's webhook")]
    /// No signature annotation (the payload names it): a hand-written plan or status.
    Missing(&'static str),
    #[error("its signature {0:?} is not in the v1.<key id>.<mac> format")]
    /// Not `v1.<key id>.<hex MAC>` (the payload is the value, cut to 80 characters).
    Malformed(String),
    #[error(
        "it was signed with key {0}, which is neither this installation's current nor its \
         previous plan key (another installation, an old backup, or a key rotated twice since)"
    )]
    /// Signed with a key id that is neither `current` nor `previous` (the payload).
    UnknownKey(String),
    #[error("its signature does not match its content: it was written or edited after admission")]
    /// The MAC does not match the content and binding: edited, copied or forged.
    Mismatch,
}

/// One HMAC key and its id.
#[derive(Clone)]
pub struct SigningKey {
    id: String,
    key: hmac::Key,
}

impl SigningKey {
    fn new(bytes: &[u8], which: &'static str) -> Result<Self, KeyError> {
        if bytes.len() < MIN_KEY_BYTES {
            return Err(KeyError::TooShort {
                which,
                len: bytes.len(),
            });
        }
        Ok(Self {
            id: lower_hex(&digest(&SHA256, bytes).as_ref()[..4]),
            key: hmac::Key::new(hmac::HMAC_SHA256, bytes),
        })
    }

    /// The key id: the first 8 hex digits of the key's SHA-256, as it appears in signatures.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print key material.
        write!(f, "SigningKey({})", self.id)
    }
}

/// The installation's plan keys.
#[derive(Clone, Debug)]
pub struct PlanKeys {
    current: SigningKey,
    previous: Option<SigningKey>,
}

/// What a plan signature binds the plan to: the pod as the webhook saw it at admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodBinding<'a> {
    /// The pod's namespace.
    pub namespace: &'a str,
    /// Empty for a `generateName` pod (the API server names it after admission).
    pub name: &'a str,
    /// `metadata.generateName`; empty when the pod has none.
    pub generate_name: &'a str,
}

impl PlanKeys {
    /// The `current` and optional `previous` keys (raw bytes of the plan-key Secret's entries or
    /// of the key files, at least [`MIN_KEY_BYTES`] each).
    pub fn new(current: &[u8], previous: Option<&[u8]>) -> Result<Self, KeyError> {
        Ok(Self {
            current: SigningKey::new(current, "current")?,
            previous: previous
                .map(|p| SigningKey::new(p, "previous"))
                .transpose()?,
        })
    }

    /// Id of the `current` key, the one that signs.
    pub fn current_id(&self) -> &str {
        self.current.id()
    }

    /// Id of the `previous` key, which still verifies, if there is one.
    pub fn previous_id(&self) -> Option<&str> {
        self.previous.as_ref().map(SigningKey::id)
    }

    /// The `restore-hooks.dev/plan-signature` value for the exact plan annotation bytes `plan`,
    /// bound to `pod`, signed with `current` (§9.1).
    pub fn sign_plan(&self, pod: PodBinding<'_>, plan: &str) -> String {
        self.sign(&plan_message(pod, plan))
    }

    /// Checks a plan signature under `current` or `previous` for this binding (§9.3); `None`:
    /// the pod has no signature annotation.
    pub fn verify_plan(
        &self,
        pod: PodBinding<'_>,
        plan: &str,
        signature: Option<&str>,
    ) -> Result<(), SignatureError> {
        let signature = signature.ok_or(SignatureError::Missing(PLAN_SIGNATURE_ANNOTATION))?;
        self.verify(&plan_message(pod, plan), signature)
    }

    /// The `restore-hooks.dev/status-signature` value for the status annotation bytes, bound to
    /// the pod's uid (§9.4).
    pub fn sign_status(&self, pod_uid: &str, status: &str) -> String {
        self.sign(&status_message(pod_uid, status))
    }

    /// Checks a status signature for the pod's uid (§9.4); a status that fails is never trusted.
    pub fn verify_status(
        &self,
        pod_uid: &str,
        status: &str,
        signature: Option<&str>,
    ) -> Result<(), SignatureError> {
        let signature = signature.ok_or(SignatureError::Missing(STATUS_SIGNATURE_ANNOTATION))?;
        self.verify(&status_message(pod_uid, status), signature)
    }

    fn sign(&self, message: &[u8]) -> String {
        let tag = hmac::sign(&self.current.key, message);
        format!("{VERSION}.{}.{}", self.current.id, lower_hex(tag.as_ref()))
    }

    fn verify(&self, message: &[u8], signature: &str) -> Result<(), SignatureError> {
        let malformed = || SignatureError::Malformed(truncated(signature));
        let mut parts = signature.splitn(3, '.');
        let (Some(VERSION), Some(id), Some(mac)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(malformed());
        };
        let mac = unhex(mac).ok_or_else(malformed)?;
        let key = [Some(&self.current), self.previous.as_ref()]
            .into_iter()
            .flatten()
            .find(|k| k.id == id)
            .ok_or_else(|| SignatureError::UnknownKey(truncated(id)))?;
        hmac::verify(&key.key, message, &mac).map_err(|_| SignatureError::Mismatch)
    }
}

/// Length-prefixed fields, so that no two different bindings produce the same message (a name
/// ending in the namespace's first letters cannot shift a boundary).
fn framed(domain: &str, fields: &[&str]) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(domain.len() + fields.iter().map(|f| f.len() + 9).sum::<usize>());
    out.extend_from_slice(domain.as_bytes());
    for field in fields {
        out.extend_from_slice(&(field.len() as u64).to_be_bytes());
        out.push(b':');
        out.extend_from_slice(field.as_bytes());
    }
    out
}

fn plan_message(pod: PodBinding<'_>, plan: &str) -> Vec<u8> {
    framed(
        "restore-hooks.dev/plan/v1",
        &[pod.namespace, pod.name, pod.generate_name, plan],
    )
}

fn status_message(pod_uid: &str, status: &str) -> Vec<u8> {
    framed("restore-hooks.dev/status/v1", &[pod_uid, status])
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 128 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn truncated(s: &str) -> String {
    s.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &[u8] = b"0123456789abcdef0123456789abcdef";
    const B: &[u8] = b"fedcba9876543210fedcba9876543210";

    fn pod<'a>(namespace: &'a str, name: &'a str, generate_name: &'a str) -> PodBinding<'a> {
        PodBinding {
            namespace,
            name,
            generate_name,
        }
    }

    #[test]
    fn a_plan_verifies_only_for_its_pod_and_content() {
        let keys = PlanKeys::new(A, None).unwrap();
        let plan = r#"{"restore":"r","hooks":[]}"#;
        let p = pod("shop", "db-0", "");
        let sig = keys.sign_plan(p, plan);
        assert!(sig.starts_with(&format!("v1.{}.", keys.current_id())));
        assert_eq!(keys.verify_plan(p, plan, Some(&sig)), Ok(()));

        let cases: &[(PodBinding<'_>, &str, Option<&str>, SignatureError)] = &[
            (
                p,
                plan,
                None,
                SignatureError::Missing(PLAN_SIGNATURE_ANNOTATION),
            ),
            (
                pod("other", "db-0", ""),
                plan,
                Some(&sig),
                SignatureError::Mismatch,
            ),
            (
                pod("shop", "db-1", ""),
                plan,
                Some(&sig),
                SignatureError::Mismatch,
            ),
            (
                pod("shop", "db-0", "db-"),
                plan,
                Some(&sig),
                SignatureError::Mismatch,
            ),
            (
                p,
                r#"{"restore":"r","hooks":[1]}"#,
                Some(&sig),
                SignatureError::Mismatch,
            ),
            (
                p,
                plan,
                Some("v1.zz"),
                SignatureError::Malformed("v1.zz".into()),
            ),
            (
                p,
                plan,
                Some("v2.a.b"),
                SignatureError::Malformed("v2.a.b".into()),
            ),
            (
                p,
                plan,
                Some("v1.00000000.abcd"),
                SignatureError::UnknownKey("00000000".into()),
            ),
        ];
        for (binding, content, signature, want) in cases {
            assert_eq!(
                keys.verify_plan(*binding, content, *signature).as_ref(),
                Err(want),
                "{binding:?} {content} {signature:?}"
            );
        }
        // Shifting bytes between fields does not keep a signature valid.
        let shifted = keys.sign_plan(pod("sh", "opdb-0", ""), plan);
        assert_ne!(shifted, keys.sign_plan(pod("shop", "db-0", ""), plan));
    }

    #[test]
    fn rotation_keeps_the_previous_key_verifying() {
        let old = PlanKeys::new(A, None).unwrap();
        let plan = "{}";
        let p = pod("ns", "", "web-");
        let issued_before = old.sign_plan(p, plan);
        let rotated = PlanKeys::new(B, Some(A)).unwrap();
        assert_eq!(rotated.verify_plan(p, plan, Some(&issued_before)), Ok(()));
        assert_eq!(rotated.previous_id(), Some(old.current_id()));
        let twice = PlanKeys::new(b"another-key-of-thirty-two-bytes!", Some(B)).unwrap();
        assert!(matches!(
            twice.verify_plan(p, plan, Some(&issued_before)),
            Err(SignatureError::UnknownKey(_))
        ));
    }

    #[test]
    fn statuses_are_bound_to_the_pod_uid() {
        let keys = PlanKeys::new(A, None).unwrap();
        let sig = keys.sign_status("uid-1", "{\"hooks\":[]}");
        assert_eq!(
            keys.verify_status("uid-1", "{\"hooks\":[]}", Some(&sig)),
            Ok(())
        );
        assert_eq!(
            keys.verify_status("uid-2", "{\"hooks\":[]}", Some(&sig)),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn short_keys_are_refused_and_keys_never_print() {
        assert_eq!(
            PlanKeys::new(b"short", None).unwrap_err(),
            KeyError::TooShort {
                which: "current",
                len: 5
            }
        );
        assert!(PlanKeys::new(A, Some(b"x")).is_err());
        let printed = format!("{:?}", PlanKeys::new(A, None).unwrap());
        assert!(!printed.contains("0123456789abcdef"), "{printed}");
    }
}
