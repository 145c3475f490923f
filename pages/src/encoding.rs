//! How the pages write bytes into forms and read them back: lower-case hex, strictly.

/// Lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    ::hex::encode(bytes)
}

/// Exactly `N` bytes as [`hex`] writes them (`2 * N` lower-case digits); `None` for anything
/// else.
pub(crate) fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut bytes = [0u8; N];
    ::hex::decode_to_slice(text, &mut bytes).ok()?;
    Some(bytes)
}
