//! JSON-RPC 2.0 messages as MCP carries them: parse, classify, re-serialize.
//!
//! Every byte an agent sends towards an MCP server goes through [`parse`] first. What is
//! forwarded is always [`Incoming::to_bytes`] of the parsed message, never the frame received,
//! so the upstream sees exactly the message the governor judged: unknown top-level members are
//! dropped, a duplicated member reaches the upstream once (the last, as it was judged), and a
//! batch is judged member by member. Malformed input is a [`ParseError`] and nothing at all is
//! forwarded.
//!
//! A request's `params` and a response's `result` are kept as the text they arrived as
//! ([`Raw`]), not as a tree: their tokens are forwarded as written (member order, escapes,
//! numbers no tree keeps exactly), only the whitespace between tokens is removed (a forwarded
//! message is always one line, which a stdio upstream's framing needs), and they are read only
//! where a decision needs them (`params.name` of a `tools/call`, `isError` of a result, a
//! `tools/list` result's annotations). The profile of the read-only path showed the trees built
//! and written back for every call as one of the largest costs the gateway added over a bare
//! proxy.

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// JSON-RPC "Parse error": the bytes are not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC "Invalid Request": JSON, but not a JSON-RPC 2.0 message.
pub const INVALID_REQUEST: i64 = -32600;
/// The error code stopline answers a refused call with; the refusal code is in `error.data`.
pub const STOPLINE_REFUSED: i64 = -32001;

/// A request id: a string or a number (`null` only ever appears in error responses).
pub type Id = Value;

/// A JSON value kept as the text it arrived as, without the whitespace between its tokens: a
/// request's `params`, a response's `result`. Valid JSON, written back as it is.
#[derive(Clone)]
pub struct Raw(Box<str>);

impl Raw {
    /// The value's JSON text.
    pub fn get(&self) -> &str {
        &self.0
    }

    /// The raw form of a value (its compact JSON text).
    pub fn from_value(value: &Value) -> Raw {
        Raw(value.to_string().into())
    }

    /// `raw` (valid JSON) without the whitespace between its tokens. JSON whitespace is ASCII
    /// and never part of a multi-byte UTF-8 sequence, and a string cannot hold a raw control
    /// character, so every byte outside a string is a token's or whitespace.
    fn compact(raw: &RawValue) -> Raw {
        let text = raw.get();
        let mut out = Vec::with_capacity(text.len());
        let (mut in_string, mut escaped) = (false, false);
        for &byte in text.as_bytes() {
            if in_string {
                if escaped {
                    escaped = false;
                } else if byte == b'\\' {
                    escaped = true;
                } else if byte == b'"' {
                    in_string = false;
                }
            } else if matches!(byte, b' ' | b'\t' | b'\n' | b'\r') {
                continue;
            } else if byte == b'"' {
                in_string = true;
            }
            out.push(byte);
        }
        // Only ASCII whitespace was removed from valid UTF-8.
        Raw(String::from_utf8(out)
            .expect("removing ASCII whitespace keeps UTF-8 valid")
            .into())
    }

    /// The value as a tree (for the few places that read all of it).
    pub fn to_value(&self) -> Value {
        // The text was validated as JSON when it was parsed.
        serde_json::from_str(self.get()).unwrap_or(Value::Null)
    }

    /// True when the value is a JSON object.
    pub fn is_object(&self) -> bool {
        self.get().starts_with('{')
    }

    /// True when the value is a JSON array.
    pub fn is_array(&self) -> bool {
        self.get().starts_with('[')
    }

    /// The top-level member `key` of an object, as a tree: the last one when it appears more
    /// than once (how [`Value`] reads a duplicated member), with how many times it appears.
    /// `(None, 0)` for anything but an object without that member.
    pub fn member(&self, key: &str) -> (Option<Value>, usize) {
        if !self.is_object() {
            return (None, 0);
        }
        let mut de = serde_json::Deserializer::from_str(self.get());
        de.deserialize_map(MemberVisitor(key)).unwrap_or((None, 0))
    }

    /// The top-level string member `key` of an object, if it appears exactly once.
    pub fn unique_str(&self, key: &str) -> Result<Option<String>, usize> {
        match self.member(key) {
            (Some(Value::String(text)), 1) => Ok(Some(text)),
            (_, times) if times > 1 => Err(times),
            _ => Ok(None),
        }
    }
}

impl PartialEq for Raw {
    fn eq(&self, other: &Raw) -> bool {
        self.get() == other.get()
    }
}

impl std::fmt::Debug for Raw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.get())
    }
}

struct MemberVisitor<'k>(&'k str);

impl<'de> Visitor<'de> for MemberVisitor<'_> {
    type Value = (Option<Value>, usize);

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut last, mut times) = (None, 0);
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == self.0 {
                last = Some(map.next_value::<Value>()?);
                times += 1;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok((last, times))
    }
}

/// Any JSON value, kept only when it is a string (borrowed when it has no escapes).
struct MaybeStr<'de>(Option<std::borrow::Cow<'de, str>>);

impl<'de> serde::Deserialize<'de> for MaybeStr<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<MaybeStr<'de>, D::Error> {
        struct MaybeStrVisitor;
        impl<'de> Visitor<'de> for MaybeStrVisitor {
            type Value = MaybeStr<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<MaybeStr<'de>, E> {
                Ok(MaybeStr(Some(std::borrow::Cow::Borrowed(text))))
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<MaybeStr<'de>, E> {
                Ok(MaybeStr(Some(std::borrow::Cow::Owned(text.to_owned()))))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<MaybeStr<'de>, E> {
                Ok(MaybeStr(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<MaybeStr<'de>, E> {
                Ok(MaybeStr(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<MaybeStr<'de>, E> {
                Ok(MaybeStr(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<MaybeStr<'de>, E> {
                Ok(MaybeStr(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<MaybeStr<'de>, E> {
                Ok(MaybeStr(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MaybeStr<'de>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(MaybeStr(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MaybeStr<'de>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(MaybeStr(None))
            }
        }
        deserializer.deserialize_any(MaybeStrVisitor)
    }
}

/// The `jsonrpc` member's value, read only for whether it is the string `"2.0"` (the version
/// check needs nothing else, and a tree allocated the text of every message's version).
struct Version(bool);

impl<'de> serde::Deserialize<'de> for Version {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Version, D::Error> {
        Ok(Version(matches!(
            MaybeStr::deserialize(deserializer)?.0.as_deref(),
            Some("2.0")
        )))
    }
}

/// One JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A call that expects a response.
    Request {
        /// Its id.
        id: Id,
        /// The method name.
        method: String,
        /// Its params (absent stays absent), as the agent wrote them.
        params: Option<Raw>,
    },
    /// A call without an id: no response is ever sent.
    Notification {
        /// The method name.
        method: String,
        /// Its params, as written.
        params: Option<Raw>,
    },
    /// A response: exactly one of `result` and `error`.
    Response {
        /// The id of the request it answers (`null` for an unattributable error).
        id: Id,
        /// `Ok(result)`, as written, or `Err(error object)` (its members in sorted order, as
        /// a tree prints them).
        outcome: Result<Raw, Raw>,
    },
}

/// What one transport frame held: a single message or a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// One message.
    Single(Message),
    /// A non-empty array of messages.
    Batch(Vec<Message>),
}

/// Why a frame was refused before anything was forwarded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// Not JSON at all.
    #[error("parse error: {0}")]
    NotJson(String),
    /// JSON, but not a JSON-RPC 2.0 message (or a batch with such a member, or an empty batch).
    #[error("invalid request: {0}")]
    Invalid(String),
}

impl ParseError {
    /// The JSON-RPC error code of this failure.
    pub fn code(&self) -> i64 {
        match self {
            ParseError::NotJson(_) => PARSE_ERROR,
            ParseError::Invalid(_) => INVALID_REQUEST,
        }
    }

    /// The error response to send back (id `null`: the id could not be trusted).
    pub fn to_response(&self) -> Message {
        Message::error(Value::Null, self.code(), &self.to_string(), None)
    }
}

/// The members of one JSON object that JSON-RPC gives a meaning to (the last of each, as a
/// [`Value`] map would keep it); every other member is skipped unread.
#[derive(Default)]
struct Members<'de> {
    jsonrpc: Option<Version>,
    id: Option<Value>,
    method: Option<Value>,
    params: Option<&'de RawValue>,
    result: Option<&'de RawValue>,
    error: Option<Value>,
}

/// The shape of one JSON value of a frame, read in one pass without building a tree.
enum Shape<'de> {
    Object(Members<'de>),
    Array(Vec<Shape<'de>>),
    Other,
}

enum Key {
    Jsonrpc,
    Id,
    Method,
    Params,
    Result,
    Error,
    Other,
}

impl<'de> serde::Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Key, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<Key, E> {
                Ok(match key {
                    "jsonrpc" => Key::Jsonrpc,
                    "id" => Key::Id,
                    "method" => Key::Method,
                    "params" => Key::Params,
                    "result" => Key::Result,
                    "error" => Key::Error,
                    _ => Key::Other,
                })
            }
        }
        deserializer.deserialize_identifier(KeyVisitor)
    }
}

/// Reads a [`Shape`]; `top` allows an array (a batch), whose members may not be arrays.
struct ShapeVisitor {
    top: bool,
}

struct Element;

impl<'de> serde::de::DeserializeSeed<'de> for Element {
    type Value = Shape<'de>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Shape<'de>, D::Error> {
        deserializer.deserialize_any(ShapeVisitor { top: false })
    }
}

impl<'de> Visitor<'de> for ShapeVisitor {
    type Value = Shape<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Shape<'de>, A::Error> {
        let mut m = Members::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Jsonrpc => m.jsonrpc = Some(map.next_value()?),
                Key::Id => m.id = Some(map.next_value()?),
                Key::Method => m.method = Some(map.next_value()?),
                Key::Params => m.params = Some(map.next_value()?),
                Key::Result => m.result = Some(map.next_value()?),
                Key::Error => m.error = Some(map.next_value()?),
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Shape::Object(m))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shape<'de>, A::Error> {
        if !self.top {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(Shape::Other);
        }
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Element)? {
            items.push(item);
        }
        Ok(Shape::Array(items))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Shape<'de>, E> {
        Ok(Shape::Other)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Shape<'de>, E> {
        Ok(Shape::Other)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Shape<'de>, E> {
        Ok(Shape::Other)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Shape<'de>, E> {
        Ok(Shape::Other)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Shape<'de>, E> {
        Ok(Shape::Other)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Shape<'de>, E> {
        Ok(Shape::Other)
    }
}

/// Parse one frame (an HTTP body or one stdio line).
pub fn parse(bytes: &[u8]) -> Result<Incoming, ParseError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let shape = de
        .deserialize_any(ShapeVisitor { top: true })
        .and_then(|shape| de.end().map(|()| shape))
        .map_err(|e| ParseError::NotJson(e.to_string()))?;
    match shape {
        Shape::Array(items) if items.is_empty() => Err(ParseError::Invalid("empty batch".into())),
        Shape::Array(items) => items
            .into_iter()
            .map(Message::from_shape)
            .collect::<Result<Vec<_>, _>>()
            .map(Incoming::Batch),
        other => Message::from_shape(other).map(Incoming::Single),
    }
}

fn valid_id(id: &Value) -> bool {
    matches!(id, Value::String(_)) || id.as_i64().is_some() || id.as_u64().is_some()
}

impl Message {
    /// Classify one JSON value as a JSON-RPC 2.0 message.
    pub fn from_value(value: Value) -> Result<Message, ParseError> {
        let bytes = serde_json::to_vec(&value).expect("a JSON value always serializes");
        let mut de = serde_json::Deserializer::from_slice(&bytes);
        let shape = de
            .deserialize_any(ShapeVisitor { top: false })
            .map_err(|e| ParseError::NotJson(e.to_string()))?;
        Message::from_shape(shape)
    }

    fn from_shape(shape: Shape<'_>) -> Result<Message, ParseError> {
        let invalid = |why: &str| ParseError::Invalid(why.to_string());
        let Shape::Object(m) = shape else {
            return Err(invalid("a message must be a JSON object"));
        };
        if !matches!(m.jsonrpc, Some(Version(true))) {
            return Err(invalid("\"jsonrpc\" must be \"2.0\""));
        }
        let Members {
            id,
            method,
            params,
            result,
            error,
            ..
        } = m;
        let params = params.map(Raw::compact);
        if params
            .as_ref()
            .is_some_and(|p| !p.is_object() && !p.is_array())
        {
            return Err(invalid("\"params\" must be an object or an array"));
        }
        match method {
            Some(Value::String(method)) => {
                if result.is_some() || error.is_some() {
                    return Err(invalid("a request cannot carry a result or an error"));
                }
                match id {
                    None => Ok(Message::Notification { method, params }),
                    Some(id) if valid_id(&id) => Ok(Message::Request { id, method, params }),
                    Some(_) => Err(invalid("a request id must be a string or an integer")),
                }
            }
            Some(_) => Err(invalid("\"method\" must be a string")),
            None => {
                let id = id.ok_or_else(|| invalid("a response needs an id"))?;
                if !valid_id(&id) && !id.is_null() {
                    return Err(invalid(
                        "a response id must be a string, an integer or null",
                    ));
                }
                match (result, error) {
                    (Some(result), None) => Ok(Message::Response {
                        id,
                        outcome: Ok(Raw::compact(result)),
                    }),
                    (None, Some(error @ Value::Object(_)))
                        if error.get("code").is_some_and(Value::is_i64)
                            && error.get("message").is_some_and(Value::is_string) =>
                    {
                        Ok(Message::Response {
                            id,
                            outcome: Err(Raw::from_value(&error)),
                        })
                    }
                    _ => Err(invalid(
                        "a response needs exactly one of result and a valid error",
                    )),
                }
            }
        }
    }

    /// The JSON value of this message (its params or result as trees).
    pub fn to_value(&self) -> Value {
        let mut object = Map::new();
        object.insert("jsonrpc".into(), "2.0".into());
        match self {
            Message::Request { id, method, params } => {
                object.insert("id".into(), id.clone());
                object.insert("method".into(), method.clone().into());
                if let Some(params) = params {
                    object.insert("params".into(), params.to_value());
                }
            }
            Message::Notification { method, params } => {
                object.insert("method".into(), method.clone().into());
                if let Some(params) = params {
                    object.insert("params".into(), params.to_value());
                }
            }
            Message::Response { id, outcome } => {
                object.insert("id".into(), id.clone());
                match outcome {
                    Ok(result) => object.insert("result".into(), result.to_value()),
                    Err(error) => object.insert("error".into(), error.to_value()),
                };
            }
        }
        Value::Object(object)
    }

    /// A successful response carrying `result`.
    pub fn result(id: Id, result: &Value) -> Message {
        Message::Response {
            id,
            outcome: Ok(Raw::from_value(result)),
        }
    }

    /// An error response.
    pub fn error(id: Id, code: i64, message: &str, data: Option<Value>) -> Message {
        Message::error_with(id, code, message, data.as_ref())
    }

    /// An error response whose `data` is `data` serialized: written once, straight to its text,
    /// with no tree made for it (a refusal is the answer a stopped agent gets on every call).
    /// `data` must serialize its members in sorted order, as a tree would print them.
    pub fn error_with<D: Serialize>(id: Id, code: i64, message: &str, data: Option<&D>) -> Message {
        /// The error object's members in the sorted order a tree prints them in.
        #[derive(Serialize)]
        struct ErrorObject<'a, D> {
            code: i64,
            #[serde(skip_serializing_if = "Option::is_none")]
            data: Option<&'a D>,
            message: &'a str,
        }
        let object = ErrorObject {
            code,
            data,
            message,
        };
        let text = serde_json::to_string(&object).unwrap_or_else(|_| {
            // Only a `data` whose serialization fails (a map with non-string keys) gets here.
            serde_json::to_string(&ErrorObject::<()> {
                code,
                data: None,
                message,
            })
            .expect("an error object without data always serializes")
        });
        Message::Response {
            id,
            outcome: Err(Raw(text.into())),
        }
    }

    /// The method of a request or notification.
    pub fn method(&self) -> Option<&str> {
        match self {
            Message::Request { method, .. } | Message::Notification { method, .. } => Some(method),
            Message::Response { .. } => None,
        }
    }

    /// The id of a request or response.
    pub fn id(&self) -> Option<&Id> {
        match self {
            Message::Request { id, .. } | Message::Response { id, .. } => Some(id),
            Message::Notification { .. } => None,
        }
    }
}

impl Incoming {
    /// The messages of this frame, in order.
    pub fn messages(&self) -> &[Message] {
        match self {
            Incoming::Single(message) => std::slice::from_ref(message),
            Incoming::Batch(messages) => messages,
        }
    }

    /// Rebuild a frame from messages: one message stays single unless `batch` is asked for.
    pub fn from_messages(mut messages: Vec<Message>, batch: bool) -> Option<Incoming> {
        match (messages.len(), batch) {
            (0, _) => None,
            (1, false) => messages.pop().map(Incoming::Single),
            _ => Some(Incoming::Batch(messages)),
        }
    }

    /// The canonical bytes of this frame (what is forwarded): one line.
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            Incoming::Single(message) => message.to_bytes(),
            Incoming::Batch(messages) => {
                let mut out = Vec::with_capacity(messages.len() * 64 + 2);
                out.push(b'[');
                for (n, message) in messages.iter().enumerate() {
                    if n > 0 {
                        out.push(b',');
                    }
                    message.write(&mut out);
                }
                out.push(b']');
                out
            }
        }
    }
}

impl Message {
    /// The canonical bytes of this message alone (one line): its members in the sorted order
    /// of a `serde_json::Map`, which is how the canonical message has always printed, `params`
    /// and `result` as they arrived (see [`Raw`]).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.size_hint());
        self.write(&mut out);
        out
    }

    /// About how long [`Message::write`] makes this message: its method, params or result and
    /// room for the rest (the buffer is made once instead of grown as they are written).
    fn size_hint(&self) -> usize {
        64 + match self {
            Message::Request { method, params, .. } | Message::Notification { method, params } => {
                method.len() + params.as_ref().map_or(0, |p| p.get().len())
            }
            Message::Response { outcome, .. } => match outcome {
                Ok(raw) | Err(raw) => raw.get().len(),
            },
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Message::Request { id, method, params } => {
                out.extend_from_slice(b"{\"id\":");
                write_json(out, id);
                out.extend_from_slice(b",\"jsonrpc\":\"2.0\",\"method\":");
                write_json(out, method);
                if let Some(params) = params {
                    out.extend_from_slice(b",\"params\":");
                    out.extend_from_slice(params.get().as_bytes());
                }
            }
            Message::Notification { method, params } => {
                out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
                write_json(out, method);
                if let Some(params) = params {
                    out.extend_from_slice(b",\"params\":");
                    out.extend_from_slice(params.get().as_bytes());
                }
            }
            Message::Response { id, outcome } => match outcome {
                Ok(result) => {
                    out.extend_from_slice(b"{\"id\":");
                    write_json(out, id);
                    out.extend_from_slice(b",\"jsonrpc\":\"2.0\",\"result\":");
                    out.extend_from_slice(result.get().as_bytes());
                }
                Err(error) => {
                    out.extend_from_slice(b"{\"error\":");
                    out.extend_from_slice(error.get().as_bytes());
                    out.extend_from_slice(b",\"id\":");
                    write_json(out, id);
                    out.extend_from_slice(b",\"jsonrpc\":\"2.0\"");
                }
            },
        }
        out.push(b'}');
    }
}

/// Write a JSON value or string compactly.
fn write_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // A `Value` or a string always serializes.
    serde_json::to_writer(out, value).expect("a JSON value always serializes");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expected: Result<&str, i64>) {
        match (parse(input.as_bytes()), expected) {
            (Ok(parsed), Ok(canonical)) => {
                assert_eq!(
                    String::from_utf8(parsed.to_bytes()).unwrap(),
                    canonical,
                    "{input}"
                )
            }
            (Err(error), Err(code)) => assert_eq!(error.code(), code, "{input}: {error}"),
            (got, want) => panic!("{input}: got {got:?}, wanted {want:?}"),
        }
    }

    #[test]
    fn messages_are_classified_and_reserialized() {
        check(
            r#"{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{"name":"echo"},"x":1}"#,
            Ok(r#"{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{"name":"echo"}}"#),
        );
        check(
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            Ok(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
        );
        check(
            r#"[{"jsonrpc":"2.0","id":"a","result":{}},{"jsonrpc":"2.0","id":null,"error":{"code":-1,"message":"m"}}]"#,
            Ok(
                r#"[{"id":"a","jsonrpc":"2.0","result":{}},{"error":{"code":-1,"message":"m"},"id":null,"jsonrpc":"2.0"}]"#,
            ),
        );
    }

    #[test]
    fn direct_bytes_are_the_canonical_value() {
        // Compact, sorted params and results print the same as the message's canonical tree.
        let frames = [
            r#"{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{"arguments":{"z":[1,{"a":"é\n","b":2}]},"name":"echo"}}"#,
            r#"{"jsonrpc":"2.0","id":"x","method":"ping"}"#,
            r#"{"method":"notifications/progress","jsonrpc":"2.0","params":[1,2]}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"text":"hi","type":"text"}],"isError":false}}"#,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"m","data":{"code":"c"}}}"#,
            r#"[{"jsonrpc":"2.0","id":"a","result":{}},{"jsonrpc":"2.0","id":2,"method":"m"}]"#,
        ];
        for input in frames {
            let frame = parse(input.as_bytes()).unwrap();
            let canonical = match &frame {
                Incoming::Single(message) => message.to_value(),
                Incoming::Batch(messages) => {
                    Value::Array(messages.iter().map(Message::to_value).collect())
                }
            };
            assert_eq!(
                String::from_utf8(frame.to_bytes()).unwrap(),
                serde_json::to_string(&canonical).unwrap(),
                "{input}"
            );
        }
    }

    #[test]
    fn params_and_results_are_forwarded_as_the_agent_and_the_server_wrote_them() {
        // Member order, escapes and numbers no tree keeps exactly (an integer beyond u64, a
        // float's spelling) go on as they came; only the whitespace between tokens goes.
        let params = r#"{ "name" : "echo", "arguments": {"z": [1, {"b": 2, "a": "\u00e9\n"}], "big": 123456789012345678901234567890, "f": 1.50e3} }"#;
        let compact = r#"{"name":"echo","arguments":{"z":[1,{"b":2,"a":"\u00e9\n"}],"big":123456789012345678901234567890,"f":1.50e3}}"#;
        let input = format!(
            r#"{{"params": {params}, "method":"tools/call", "id":1, "jsonrpc":"2.0", "x":[1]}}"#
        );
        let forwarded = String::from_utf8(parse(input.as_bytes()).unwrap().to_bytes()).unwrap();
        assert_eq!(
            forwarded,
            format!(r#"{{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{compact}}}"#)
        );
        let result = "{\"content\": [{\"type\":\"text\",\"text\":\"\\u0041 \\\" 9007199254740993\"}],\r\n \"isError\" :false}";
        let answer = format!(r#"{{"jsonrpc":"2.0","id":"r","result":{result}}}"#);
        let Incoming::Single(Message::Response {
            outcome: Ok(raw), ..
        }) = parse(answer.as_bytes()).unwrap()
        else {
            panic!("a response");
        };
        assert_eq!(
            raw.get(),
            r#"{"content":[{"type":"text","text":"\u0041 \" 9007199254740993"}],"isError":false}"#
        );
        assert_eq!(raw.member("isError"), (Some(Value::Bool(false)), 1));
    }

    #[test]
    fn a_forwarded_message_is_one_line_whatever_whitespace_it_came_with() {
        // Line breaks between tokens could otherwise put a second, unjudged message on a line
        // of its own in front of a stdio server.
        let smuggler = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"read\",\"x\":\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"write\"}}\n}}";
        let frame = parse(smuggler.as_bytes()).unwrap();
        let forwarded = frame.to_bytes();
        assert!(!forwarded.contains(&b'\n') && !forwarded.contains(&b'\r'));
        assert_eq!(
            String::from_utf8(forwarded).unwrap(),
            r#"{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{"name":"read","x":{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"write"}}}}"#
        );
    }

    #[test]
    fn a_duplicated_member_is_read_as_its_last_occurrence() {
        // The message's own members: the last one is judged and the only one forwarded.
        check(
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","method":"tools/list","params":[1],"params":{"name":"a"}}"#,
            Ok(r#"{"id":5,"jsonrpc":"2.0","method":"tools/list","params":{"name":"a"}}"#),
        );
        // Inside params (forwarded as written): counted, so a caller can refuse the ambiguity.
        let Incoming::Single(Message::Request { params: Some(params), .. }) = parse(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","n\u0061me":"write"}}"#,
        )
        .unwrap() else {
            panic!("a request with params");
        };
        assert_eq!(params.member("name"), (Some(Value::from("write")), 2));
        assert_eq!(params.unique_str("name"), Err(2));
        assert_eq!(params.unique_str("other"), Ok(None));
    }

    /// The version check, made without a tree, accepts exactly the messages whose `jsonrpc`
    /// is the string "2.0" as a tree reads it (escapes included).
    #[test]
    fn the_version_check_agrees_with_the_tree() {
        for version in [
            r#""2.0""#,
            r#""2\u002e0""#,
            r#"2.0"#,
            r#"2"#,
            r#""2.0 ""#,
            r#"null"#,
            r#"["2.0"]"#,
            r#"{"v":"2.0"}"#,
        ] {
            let text = format!(r#"{{"jsonrpc":{version},"id":1,"method":"ping"}}"#);
            let as_tree = serde_json::from_str::<Value>(&text).unwrap()["jsonrpc"] == "2.0";
            assert_eq!(parse(text.as_bytes()).is_ok(), as_tree, "{version}");
        }
    }

    #[test]
    fn malformed_frames_are_refused_whole() {
        check("{", Err(PARSE_ERROR));
        check("", Err(PARSE_ERROR));
        check("[]", Err(INVALID_REQUEST));
        check("7", Err(INVALID_REQUEST));
        check(
            r#"{"jsonrpc":"1.0","id":1,"method":"m"}"#,
            Err(INVALID_REQUEST),
        );
        check(
            r#"{"jsonrpc":"2.0","id":1.5,"method":"m"}"#,
            Err(INVALID_REQUEST),
        );
        check(
            r#"{"jsonrpc":"2.0","id":{},"method":"m"}"#,
            Err(INVALID_REQUEST),
        );
        check(
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":3}"#,
            Err(INVALID_REQUEST),
        );
        check(
            r#"{"jsonrpc":"2.0","id":1,"method":"m","result":3}"#,
            Err(INVALID_REQUEST),
        );
        check(
            r#"{"jsonrpc":"2.0","id":1,"result":1,"error":{}}"#,
            Err(INVALID_REQUEST),
        );
        check(
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"m"}}"#,
            Err(INVALID_REQUEST),
        );
        check(
            r#"[{"jsonrpc":"2.0","id":1,"method":"ok"},{"jsonrpc":"2.0"}]"#,
            Err(INVALID_REQUEST),
        );
    }
}
