//! A small serde bridge between Rust values and plain JavaScript values (objects, arrays,
//! strings, numbers), replacing serde-wasm-bindgen and serde_json in the bundle.
//!
//! Why our own: every general-purpose serde format formats its error messages eagerly, and
//! those messages can print floats, which drags Rust's float formatting (~15 KB) into the
//! Wasm module. Here an error is a unit value and messages are dropped unread, so that code is
//! never linked. It also walks an object's own keys (not the struct's field list), so
//! `deny_unknown_fields` catches option typos. JSON text goes through the browser's `JSON`.
//!
//! Supported: everything the payonce types use (structs, `Option`, unit enums as strings,
//! internally tagged enums, sequences, string-keyed maps, integers up to 2^53).

use js_sys::{Array, Object, Reflect};
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{self, Impossible, Serialize};
use std::fmt;
use wasm_bindgen::{JsCast, JsValue};

/// The one error: "this value does not fit". Deliberately carries no message (see above).
#[derive(Debug)]
pub(crate) struct Error;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("value does not match the expected shape")
    }
}
impl std::error::Error for Error {}
impl de::Error for Error {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Error
    }
}
impl ser::Error for Error {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Error
    }
}

/// Decodes a JS value.
pub(crate) fn from_js<T: de::DeserializeOwned>(v: JsValue) -> Result<T, Error> {
    T::deserialize(De(v))
}

/// Encodes as a JS value.
pub(crate) fn to_js<T: Serialize + ?Sized>(v: &T) -> Result<JsValue, Error> {
    v.serialize(Ser)
}

/// Encodes as JSON text (via `JSON.stringify`).
pub(crate) fn to_json<T: Serialize + ?Sized>(v: &T) -> String {
    to_js(v)
        .ok()
        .and_then(|v| js_sys::JSON::stringify(&v).ok())
        .and_then(|s| s.as_string())
        .unwrap_or_default()
}

const MAX_SAFE: f64 = 9_007_199_254_740_991.0;

struct De(JsValue);

/// What a JS value is, as far as serde cares.
enum Js {
    Unit,
    Bool(bool),
    U64(u64),
    I64(i64),
    F64(f64),
    Str(String),
    Seq(Array),
    Map(JsValue, Array),
    Other,
}

#[inline(never)]
fn inspect(x: JsValue) -> Js {
    if x.is_null() || x.is_undefined() {
        return Js::Unit;
    }
    if let Some(b) = x.as_bool() {
        return Js::Bool(b);
    }
    if let Some(n) = x.as_f64() {
        return if n.fract() == 0.0 && (0.0..=MAX_SAFE).contains(&n) {
            Js::U64(n as u64)
        } else if n.fract() == 0.0 && (-MAX_SAFE..0.0).contains(&n) {
            Js::I64(n as i64)
        } else {
            Js::F64(n)
        };
    }
    if let Some(s) = x.as_string() {
        return Js::Str(s);
    }
    if Array::is_array(&x) {
        return Js::Seq(x.unchecked_into());
    }
    if x.is_object() && !x.is_function() {
        let keys = Object::keys::<JsValue>(x.unchecked_ref());
        return Js::Map(x, keys);
    }
    Js::Other
}

impl<'de> de::Deserializer<'de> for De {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        // The JS inspection is not generic, so each visitor adds only this small match.
        match inspect(self.0) {
            Js::Unit => v.visit_unit(),
            Js::Bool(b) => v.visit_bool(b),
            Js::U64(n) => v.visit_u64(n),
            Js::I64(n) => v.visit_i64(n),
            Js::F64(n) => v.visit_f64(n),
            Js::Str(s) => v.visit_string(s),
            Js::Seq(items) => v.visit_seq(Seq { items, at: 0 }),
            Js::Map(obj, keys) => v.visit_map(Map {
                obj,
                keys,
                at: 0,
                value: None,
            }),
            Js::Other => Err(Error),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        if self.0.is_null() || self.0.is_undefined() {
            v.visit_none()
        } else {
            v.visit_some(self)
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        // Only unit variants travel as plain strings; that is all payonce uses.
        let s = self.0.as_string().ok_or(Error)?;
        v.visit_enum(IntoDeserializer::<Error>::into_deserializer(s))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value, Error> {
        v.visit_newtype_struct(self)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct identifier
    }
}

struct Seq {
    items: Array,
    at: u32,
}

impl<'de> SeqAccess<'de> for Seq {
    type Error = Error;
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        if self.at >= self.items.length() {
            return Ok(None);
        }
        let item = self.items.get(self.at);
        self.at += 1;
        seed.deserialize(De(item)).map(Some)
    }
}

struct Map {
    obj: JsValue,
    keys: Array,
    at: u32,
    value: Option<JsValue>,
}

impl<'de> MapAccess<'de> for Map {
    type Error = Error;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        if self.at >= self.keys.length() {
            return Ok(None);
        }
        let key = self.keys.get(self.at);
        self.at += 1;
        self.value = Some(Reflect::get(&self.obj, &key).unwrap_or(JsValue::UNDEFINED));
        seed.deserialize(De(key)).map(Some)
    }
    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        seed.deserialize(De(self.value.take().unwrap_or(JsValue::UNDEFINED)))
    }
}

struct Ser;

fn num(n: f64) -> Result<JsValue, Error> {
    Ok(JsValue::from_f64(n))
}

impl ser::Serializer for Ser {
    type Ok = JsValue;
    type Error = Error;
    type SerializeSeq = SeqSer;
    type SerializeTuple = SeqSer;
    type SerializeTupleStruct = SeqSer;
    type SerializeTupleVariant = Impossible<JsValue, Error>;
    type SerializeMap = ObjSer;
    type SerializeStruct = ObjSer;
    type SerializeStructVariant = Impossible<JsValue, Error>;

    fn serialize_bool(self, v: bool) -> Result<JsValue, Error> {
        Ok(JsValue::from_bool(v))
    }
    fn serialize_i8(self, v: i8) -> Result<JsValue, Error> {
        num(v.into())
    }
    fn serialize_i16(self, v: i16) -> Result<JsValue, Error> {
        num(v.into())
    }
    fn serialize_i32(self, v: i32) -> Result<JsValue, Error> {
        num(v.into())
    }
    fn serialize_i64(self, v: i64) -> Result<JsValue, Error> {
        num(v as f64)
    }
    fn serialize_u8(self, v: u8) -> Result<JsValue, Error> {
        num(v.into())
    }
    fn serialize_u16(self, v: u16) -> Result<JsValue, Error> {
        num(v.into())
    }
    fn serialize_u32(self, v: u32) -> Result<JsValue, Error> {
        num(v.into())
    }
    fn serialize_u64(self, v: u64) -> Result<JsValue, Error> {
        num(v as f64)
    }
    fn serialize_f32(self, v: f32) -> Result<JsValue, Error> {
        num(v.into())
    }
    fn serialize_f64(self, v: f64) -> Result<JsValue, Error> {
        num(v)
    }
    fn serialize_char(self, v: char) -> Result<JsValue, Error> {
        Ok(JsValue::from_str(v.encode_utf8(&mut [0; 4])))
    }
    fn serialize_str(self, v: &str) -> Result<JsValue, Error> {
        Ok(JsValue::from_str(v))
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<JsValue, Error> {
        Err(Error)
    }
    fn serialize_none(self) -> Result<JsValue, Error> {
        Ok(JsValue::UNDEFINED)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<JsValue, Error> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<JsValue, Error> {
        Ok(JsValue::NULL)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<JsValue, Error> {
        Ok(JsValue::NULL)
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<JsValue, Error> {
        Ok(JsValue::from_str(variant))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<JsValue, Error> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<JsValue, Error> {
        Err(Error)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<SeqSer, Error> {
        Ok(SeqSer(Array::new()))
    }
    fn serialize_tuple(self, _: usize) -> Result<SeqSer, Error> {
        Ok(SeqSer(Array::new()))
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<SeqSer, Error> {
        Ok(SeqSer(Array::new()))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Error> {
        Err(Error)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<ObjSer, Error> {
        Ok(ObjSer {
            obj: Object::new(),
            key: JsValue::UNDEFINED,
        })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<ObjSer, Error> {
        Ok(ObjSer {
            obj: Object::new(),
            key: JsValue::UNDEFINED,
        })
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Error> {
        Err(Error)
    }
}

struct SeqSer(Array);

impl ser::SerializeSeq for SeqSer {
    type Ok = JsValue;
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        self.0.push(&v.serialize(Ser)?);
        Ok(())
    }
    fn end(self) -> Result<JsValue, Error> {
        Ok(self.0.into())
    }
}
impl ser::SerializeTuple for SeqSer {
    type Ok = JsValue;
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        ser::SerializeSeq::serialize_element(self, v)
    }
    fn end(self) -> Result<JsValue, Error> {
        Ok(self.0.into())
    }
}
impl ser::SerializeTupleStruct for SeqSer {
    type Ok = JsValue;
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        ser::SerializeSeq::serialize_element(self, v)
    }
    fn end(self) -> Result<JsValue, Error> {
        Ok(self.0.into())
    }
}

struct ObjSer {
    obj: Object,
    key: JsValue,
}

impl ObjSer {
    fn set(&self, key: &JsValue, v: JsValue) -> Result<(), Error> {
        // `None` members are left out, as JSON.stringify would.
        if !v.is_undefined() {
            Reflect::set(&self.obj, key, &v).map_err(|_| Error)?;
        }
        Ok(())
    }
}

impl ser::SerializeMap for ObjSer {
    type Ok = JsValue;
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Result<(), Error> {
        self.key = k.serialize(Ser)?;
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        let key = std::mem::replace(&mut self.key, JsValue::UNDEFINED);
        self.set(&key, v.serialize(Ser)?)
    }
    fn end(self) -> Result<JsValue, Error> {
        Ok(self.obj.into())
    }
}

impl ser::SerializeStruct for ObjSer {
    type Ok = JsValue;
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        k: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        self.set(&JsValue::from_str(k), v.serialize(Ser)?)
    }
    fn end(self) -> Result<JsValue, Error> {
        Ok(self.obj.into())
    }
}
