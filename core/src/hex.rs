//! Lowercase hex, written straight into one `String`: every admission formats its plan's
//! signature, where a `format!` per byte allocated and dropped a `String` for each of its 32
//! bytes. Digests and name hashes elsewhere use the same helper.

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// `bytes` as lowercase hex, two digits per byte.
pub(crate) fn lower_hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::lower_hex;

    #[test]
    fn every_byte_matches_std_formatting() {
        let bytes: Vec<u8> = (0..=255).collect();
        let expected: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(lower_hex(&bytes), expected);
    }

    #[test]
    fn empty_is_empty() {
        assert_eq!(lower_hex(&[]), "");
    }
}
