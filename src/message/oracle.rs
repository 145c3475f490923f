//! The serde-based walk the scanner replaced, kept as the oracle the scanner is tested against:
//! on any input, both must accept the same messages and read the same routing members.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::{Envelope, Params, Scalar};
use crate::protocol::RpcError;

/// Reads `body` the old way: serde_json with a visitor that refuses duplicate keys.
pub(super) fn read_envelope(body: &[u8]) -> Result<Envelope<'_>, RpcError> {
    let first = body
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .map(|i| body[i]);
    match first {
        Some(b'{') => {}
        Some(b'[') => return Err(RpcError::invalid_request()),
        _ => {
            return Err(match serde_json::from_slice::<de::IgnoredAny>(body) {
                Ok(_) => RpcError::invalid_request(),
                Err(_) => RpcError::parse_error(),
            });
        }
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let envelope = de::Deserializer::deserialize_map(&mut de, EnvelopeVisitor)
        .and_then(|envelope| de.end().map(|()| envelope));
    envelope.map_err(|e| match e.classify() {
        serde_json::error::Category::Data => RpcError::invalid_request(),
        _ => RpcError::parse_error(),
    })
}

struct EnvelopeVisitor;

impl<'de> Visitor<'de> for EnvelopeVisitor {
    type Value = Envelope<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC message")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Envelope<'de>, A::Error> {
        let mut envelope = Envelope::default();
        let mut seen = Seen::Few(Vec::new());
        while let Some(key) = map.next_key_seed(Key)? {
            match &*key {
                "jsonrpc" => envelope.jsonrpc = Some(map.next_value_seed(ScalarSeed)?),
                "method" => envelope.method = Some(map.next_value_seed(ScalarSeed)?),
                // Kept raw, to answer with the id exactly as sent; a non-scalar id is refused.
                "id" => envelope.id = Some(map.next_value::<&'de RawValue>()?.get()),
                "params" => envelope.params = Some(map.next_value_seed(ParamsSeed)?),
                _ => map.next_value_seed(Strict)?,
            }
            if !seen.insert(key) {
                return Err(de::Error::custom("duplicate key"));
            }
        }
        Ok(envelope)
    }
}

/// A value that should be a string; anything else is walked strictly and reported as `Other`.
struct ScalarSeed;

impl<'de> DeserializeSeed<'de> for ScalarSeed {
    type Value = Scalar<'de>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Scalar<'de>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ScalarSeed {
    type Value = Scalar<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Owned(v.to_owned())))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Other)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Other)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Other)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Other)
    }
    fn visit_unit<E>(self) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Other)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Scalar<'de>, A::Error> {
        Strict.visit_seq(seq).map(|()| Scalar::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Scalar<'de>, A::Error> {
        Strict.visit_map(map).map(|()| Scalar::Other)
    }
}

/// `params`, walked strictly, with its `name` picked up.
struct ParamsSeed;

impl<'de> DeserializeSeed<'de> for ParamsSeed {
    type Value = Params<'de>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Params<'de>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ParamsSeed {
    type Value = Params<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("params")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Params<'de>, A::Error> {
        let mut name = None;
        let mut seen = Seen::Few(Vec::new());
        while let Some(key) = map.next_key_seed(Key)? {
            if key == "name" {
                name = Some(map.next_value_seed(ScalarSeed)?);
            } else {
                map.next_value_seed(Strict)?;
            }
            if !seen.insert(key) {
                return Err(de::Error::custom("duplicate key"));
            }
        }
        Ok(Params::new(true, name))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Params<'de>, A::Error> {
        Strict.visit_seq(seq).map(|()| Params::new(false, None))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Params<'de>, E> {
        Ok(Params::new(false, None))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Params<'de>, E> {
        Ok(Params::new(false, None))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Params<'de>, E> {
        Ok(Params::new(false, None))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Params<'de>, E> {
        Ok(Params::new(false, None))
    }
    fn visit_str<E>(self, _: &str) -> Result<Params<'de>, E> {
        Ok(Params::new(false, None))
    }
    fn visit_unit<E>(self) -> Result<Params<'de>, E> {
        Ok(Params::new(false, None))
    }
}

/// Walks any JSON value, failing on a duplicate object key.
struct Strict;

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Strict)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = Seen::Few(Vec::new());
        while let Some(key) = map.next_key_seed(Key)? {
            if !seen.insert(key) {
                return Err(de::Error::custom("duplicate key"));
            }
            map.next_value_seed(Strict)?;
        }
        Ok(())
    }
}

/// Object keys, borrowed when they contain no escapes.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
}

/// The keys of one object seen so far: a short list, or a set once the object is large.
enum Seen<'de> {
    Few(Vec<Cow<'de, str>>),
    Many(HashSet<Cow<'de, str>>),
}

impl<'de> Seen<'de> {
    const FEW: usize = 16;

    fn insert(&mut self, key: Cow<'de, str>) -> bool {
        match self {
            Seen::Few(keys) => {
                if keys.contains(&key) {
                    return false;
                }
                if keys.len() < Self::FEW {
                    keys.push(key);
                } else {
                    let mut set: HashSet<_> = keys.drain(..).collect();
                    set.insert(key);
                    *self = Seen::Many(set);
                }
                true
            }
            Seen::Many(keys) => keys.insert(key),
        }
    }
}
