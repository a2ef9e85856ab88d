//! The keys a config table accepts, read from its type's own `Deserialize` implementation:
//! what the config reference (docs/reference/config.md) is checked against, so that a key
//! added to the code without a line in the reference fails a test.

use serde::de::{self, Deserializer, Visitor};

/// The field names a struct's `Deserialize` accepts (after `rename`), or none for a type that
/// is not a plain struct (a map, a flattened struct, an enum).
pub fn struct_fields<'de, T: serde::Deserialize<'de>>() -> &'static [&'static str] {
    let mut fields = None;
    let _ = T::deserialize(FieldNames(&mut fields));
    fields.unwrap_or(&[])
}

/// A deserializer that records the fields a struct asks for and then gives up.
struct FieldNames<'a>(&'a mut Option<&'static [&'static str]>);

impl<'de> Deserializer<'de> for FieldNames<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = Some(fields);
        Err(de::Error::custom("fields read"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
        unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    #[serde(deny_unknown_fields)]
    struct Table {
        a: u32,
        #[serde(rename = "b-key")]
        b: Option<String>,
        #[serde(default)]
        c: Vec<u8>,
    }

    #[test]
    fn a_structs_keys_are_its_fields_as_renamed() {
        assert_eq!(struct_fields::<Table>(), ["a", "b-key", "c"]);
        assert!(struct_fields::<Vec<u32>>().is_empty());
        assert!(struct_fields::<std::collections::BTreeMap<String, u32>>().is_empty());
    }
}
