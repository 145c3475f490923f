//! The small types every part of the crate shares: the nonce a state carries, the keyed digest
//! a principal is charged and bound as, the boxed future of the object-safe traits, the one
//! hex spelling of ids and digests, and which characters a user cannot see. They live here, below the stores, the token codec and the
//! decision path alike, so none of those imports another only for them.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

/// A boxed `Send` future, as returned by the object-safe store and policy traits.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The impls the 16-byte newtypes below share: `from_bytes` and `as_bytes` (each documented for
/// its own type) and a `Debug` that names the type and shows its first four bytes in hex.
macro_rules! sixteen_bytes {
    (
        $name:ident,
        $(#[$from_bytes:meta])* from_bytes,
        $(#[$as_bytes:meta])* as_bytes $(,)?
    ) => {
        impl $name {
            $(#[$from_bytes])*
            pub const fn from_bytes(bytes: [u8; 16]) -> Self {
                Self(bytes)
            }

            $(#[$as_bytes])*
            pub const fn as_bytes(&self) -> &[u8; 16] {
                &self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({}…)"), $crate::kernel::hex(&self.0[..4]))
            }
        }
    };
}

/// Bytes of OS randomness fetched at once per thread: one system call serves this many / 16
/// nonces, owners and epochs instead of one each (a call costs about as much as sealing a state).
const RANDOM_POOL: usize = 512;

/// 16 fresh bytes from the operating system's random source, through a per-thread pool.
///
/// These values must be unique, not secret (a nonce travels in the clear inside the signed
/// state); each pooled byte is handed out once. A process that forks and goes on serving in both
/// halves would hand the rest of the forking thread's pool out twice, so a duplicate nonce is
/// refused as already used: a retry fails, nothing runs twice.
fn random16() -> [u8; 16] {
    use std::cell::RefCell;
    thread_local! {
        static POOL: RefCell<([u8; RANDOM_POOL], usize)> =
            const { RefCell::new(([0; RANDOM_POOL], RANDOM_POOL)) };
    }
    POOL.with_borrow_mut(|(pool, next)| {
        if *next + 16 > RANDOM_POOL {
            #[allow(clippy::expect_used)]
            getrandom::fill(pool).expect("the OS random source failed");
            *next = 0;
        }
        let mut out = [0u8; 16];
        out.copy_from_slice(&pool[*next..*next + 16]);
        // Handed out once: overwritten so nothing in the pool repeats what was given.
        pool[*next..*next + 16].fill(0);
        *next += 16;
        out
    })
}

/// The 128-bit random value that identifies one issued `requestState` in the replay store.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Nonce([u8; 16]);

impl Nonce {
    /// A fresh nonce from the operating system's random source.
    ///
    /// # Panics
    /// If the OS random source fails; there is no safe fallback for a security nonce.
    pub fn random() -> Self {
        Self(random16())
    }

    /// Lower-case hex, for store keys.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// The nonce [`to_hex`](Self::to_hex) wrote; `None` for anything else (another length,
    /// upper-case or non-hex digits).
    pub fn from_hex(text: &str) -> Option<Self> {
        unhex(text).map(Self)
    }

    /// The first four bytes in hex: enough to correlate log lines, too little to be a store key.
    pub(crate) fn short(&self) -> String {
        hex(&self.0[..4])
    }
}

sixteen_bytes!(
    Nonce,
    /// A nonce with the given bytes.
    from_bytes,
    /// The nonce's bytes.
    as_bytes,
);

pub(crate) use sixteen_bytes;

/// Whom an entry is charged to: a keyed digest of the authenticated principal, never the name.
///
/// It is the principal digest signed into the state itself, so a state's entry has the same key on
/// every instance and across key rotation. (While two signing keys overlap, a principal's states
/// under each key count against separate budgets.)
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PrincipalKey([u8; 16]);

impl PrincipalKey {
    /// Lower-case hex, for store keys.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }
}

sixteen_bytes!(
    PrincipalKey,
    /// A key with the given bytes.
    from_bytes,
    /// The key's bytes.
    as_bytes,
);

/// Lower-case hex: every id and digest this crate writes as text.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut digits = Vec::with_capacity(bytes.len() * 2);
    for b in bytes {
        digits.push(DIGITS[usize::from(b >> 4)]);
        digits.push(DIGITS[usize::from(b & 0xf)]);
    }
    // ASCII digits: always UTF-8.
    String::from_utf8(digits).unwrap_or_default()
}

/// Exactly `N` bytes as [`hex`] writes them (`2 * N` lower-case digits); `None` for anything
/// else.
pub fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digits = text.as_bytes();
    if digits.len() != N * 2 {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut bytes = [0u8; N];
    for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(bytes)
}

/// Whether `c` is invisible or reorders what follows it, so that text carrying it can look like
/// other text: every control (`Cc`), every format character (`Cf`: bidirectional controls,
/// zero-width characters, tag characters, interlinear annotations, …) and every other
/// `Default_Ignorable_Code_Point` (variation selectors, Hangul fillers, the reserved
/// default-ignorable ranges), as Unicode 15.1's `DerivedGeneralCategory.txt` and
/// `DerivedCoreProperties.txt` list them. A table rather than a dependency: it changes rarely,
/// and only by growing.
pub(crate) fn is_invisible(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}'
            | '\u{17B5}' | '\u{3164}' | '\u{FEFF}' | '\u{FFA0}' | '\u{06DD}' | '\u{070F}'
            | '\u{08E2}' | '\u{110BD}' | '\u{110CD}'
            | '\u{0600}'..='\u{0605}'
            | '\u{0890}'..='\u{0891}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FFF0}'..='\u{FFFB}'
            | '\u{13430}'..='\u{1343F}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E0FFF}')
}

/// Reduces a label to one line of plain text of at most `max_chars` characters.
///
/// Control, format and other default-ignorable characters (bidirectional overrides, zero-width
/// characters, tag characters, variation selectors) are dropped: they can make one title look
/// like another, or carry text the user never sees, runs of whitespace become one space, and a cut label ends in `…`.
pub(crate) fn plain_label(label: &str, max_chars: usize) -> String {
    plain_text(label, max_chars).into_owned()
}

/// [`plain_label`], borrowing `label` when it is plain already (most are: short printable
/// ASCII with single spaces inside), so a form's titles copy nothing.
pub(crate) fn plain_text(label: &str, max_chars: usize) -> std::borrow::Cow<'_, str> {
    let bytes = label.as_bytes();
    if label.len() <= max_chars
        && bytes.iter().all(|b| (b' '..=b'~').contains(b))
        && !label.starts_with(' ')
        && !label.ends_with(' ')
        && !label.contains("  ")
    {
        return std::borrow::Cow::Borrowed(label);
    }
    std::borrow::Cow::Owned(reduce_label(label, max_chars))
}

/// [`plain_label`] for any text.
pub(crate) fn reduce_label(label: &str, max_chars: usize) -> String {
    let visible: String = label
        .chars()
        .filter_map(|c| {
            if c.is_whitespace() {
                Some(' ')
            } else {
                (!is_invisible(c)).then_some(c)
            }
        })
        .collect();
    let collapsed = visible.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.chars().count() <= max_chars {
        return collapsed;
    }
    let mut out: String = collapsed
        .chars()
        .take(max_chars.saturating_sub(1))
        .collect();
    out.truncate(out.trim_end().len());
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::{Nonce, RANDOM_POOL, hex, is_invisible, unhex};

    /// Nonces from the pool never repeat, across refills and threads, and are not all zero.
    #[test]
    fn pooled_nonces_do_not_repeat_across_refills_and_threads() {
        let per_thread = RANDOM_POOL / 16 * 5 + 3;
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(move || {
                    (0..per_thread).map(|_| Nonce::random()).collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all = std::collections::HashSet::new();
        for t in threads {
            for n in t.join().unwrap() {
                assert_ne!(n.as_bytes(), &[0u8; 16]);
                assert!(all.insert(n), "a nonce repeated");
            }
        }
        assert_eq!(all.len(), 4 * per_thread);
    }

    #[test]
    fn a_nonce_reads_back_from_its_hex_and_from_nothing_else() {
        let nonce = Nonce::random();
        assert_eq!(Nonce::from_hex(&nonce.to_hex()), Some(nonce));
        let upper = nonce.to_hex().to_uppercase();
        for bad in [
            "",
            "00",
            &nonce.to_hex()[1..],
            &format!("{}0", nonce.to_hex()),
        ] {
            assert_eq!(Nonce::from_hex(bad), None, "{bad:?}");
        }
        if upper != nonce.to_hex() {
            assert_eq!(Nonce::from_hex(&upper), None);
        }
        assert_eq!(Nonce::from_hex(&"g".repeat(32)), None);
    }

    #[test]
    fn format_and_ignorable_characters_are_invisible_and_text_is_not() {
        for c in [
            '\u{0007}',
            '\u{00AD}',
            '\u{061C}',
            '\u{200B}',
            '\u{202E}',
            '\u{2066}',
            '\u{206A}',
            '\u{206F}',
            '\u{FE0F}',
            '\u{FEFF}',
            '\u{FFF9}',
            '\u{FFFB}',
            '\u{1D173}',
            '\u{1BCA0}',
            '\u{E0001}',
            '\u{E0041}',
            '\u{E007F}',
            '\u{E0100}',
            '\u{3164}',
            '\u{115F}',
        ] {
            assert!(is_invisible(c), "U+{:04X}", u32::from(c));
        }
        for c in ['a', ' ', 'é', '·', '…', 'ß', '中', '\u{FFFC}', '\u{1F600}'] {
            assert!(!is_invisible(c), "U+{:04X}", u32::from(c));
        }
    }

    #[test]
    fn hex_round_trips_and_reads_nothing_else() {
        let bytes: [u8; 4] = [0x00, 0x7f, 0xa0, 0xff];
        assert_eq!(hex(&bytes), "007fa0ff");
        assert_eq!(unhex::<4>("007fa0ff"), Some(bytes));
        for bad in [
            "007FA0FF",
            "007fa0f",
            "007fa0ff0",
            "+07fa0ff",
            "0g7fa0ff",
            "",
        ] {
            assert_eq!(unhex::<4>(bad), None, "{bad}");
        }
    }
}
