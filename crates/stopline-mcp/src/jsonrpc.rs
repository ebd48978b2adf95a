//! JSON-RPC 2.0 messages as MCP carries them: parse, classify, re-serialize.
//!
//! Every byte an agent sends towards an MCP server goes through [`parse`] first. What is
//! forwarded is always [`Incoming::to_bytes`] of the parsed value, never the bytes received, so
//! the upstream sees exactly the message the governor judged: unknown top-level members are
//! dropped, a duplicated member reaches the upstream once (as it was judged), and a batch is
//! judged member by member. Malformed input is a [`ParseError`] and nothing at all is forwarded.

use serde_json::{json, Map, Value};

/// JSON-RPC "Parse error": the bytes are not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC "Invalid Request": JSON, but not a JSON-RPC 2.0 message.
pub const INVALID_REQUEST: i64 = -32600;
/// The error code stopline answers a refused call with; the refusal code is in `error.data`.
pub const STOPLINE_REFUSED: i64 = -32001;

/// A request id: a string or a number (`null` only ever appears in error responses).
pub type Id = Value;

/// One JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A call that expects a response.
    Request {
        /// Its id.
        id: Id,
        /// The method name.
        method: String,
        /// Its params (absent stays absent).
        params: Option<Value>,
    },
    /// A call without an id: no response is ever sent.
    Notification {
        /// The method name.
        method: String,
        /// Its params.
        params: Option<Value>,
    },
    /// A response: exactly one of `result` and `error`.
    Response {
        /// The id of the request it answers (`null` for an unattributable error).
        id: Id,
        /// `Ok(result)` or `Err(error object)`.
        outcome: Result<Value, Value>,
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

/// Parse one frame (an HTTP body or one stdio line).
pub fn parse(bytes: &[u8]) -> Result<Incoming, ParseError> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| ParseError::NotJson(e.to_string()))?;
    match value {
        Value::Array(items) if items.is_empty() => Err(ParseError::Invalid("empty batch".into())),
        Value::Array(items) => items
            .into_iter()
            .map(Message::from_value)
            .collect::<Result<Vec<_>, _>>()
            .map(Incoming::Batch),
        other => Message::from_value(other).map(Incoming::Single),
    }
}

fn valid_id(id: &Value) -> bool {
    matches!(id, Value::String(_)) || id.as_i64().is_some() || id.as_u64().is_some()
}

impl Message {
    /// Classify one JSON value as a JSON-RPC 2.0 message.
    pub fn from_value(value: Value) -> Result<Message, ParseError> {
        let invalid = |why: &str| ParseError::Invalid(why.to_string());
        let Value::Object(mut object) = value else {
            return Err(invalid("a message must be a JSON object"));
        };
        if object.remove("jsonrpc") != Some(Value::String("2.0".into())) {
            return Err(invalid("\"jsonrpc\" must be \"2.0\""));
        }
        let id = object.remove("id");
        let params = object.remove("params");
        if params
            .as_ref()
            .is_some_and(|p| !p.is_object() && !p.is_array())
        {
            return Err(invalid("\"params\" must be an object or an array"));
        }
        match object.remove("method") {
            Some(Value::String(method)) => {
                if object.contains_key("result") || object.contains_key("error") {
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
                match (object.remove("result"), object.remove("error")) {
                    (Some(result), None) => Ok(Message::Response {
                        id,
                        outcome: Ok(result),
                    }),
                    (None, Some(error @ Value::Object(_)))
                        if error.get("code").is_some_and(Value::is_i64)
                            && error.get("message").is_some_and(Value::is_string) =>
                    {
                        Ok(Message::Response {
                            id,
                            outcome: Err(error),
                        })
                    }
                    _ => Err(invalid(
                        "a response needs exactly one of result and a valid error",
                    )),
                }
            }
        }
    }

    /// The canonical JSON value of this message.
    pub fn to_value(&self) -> Value {
        let mut object = Map::new();
        object.insert("jsonrpc".into(), "2.0".into());
        match self {
            Message::Request { id, method, params } => {
                object.insert("id".into(), id.clone());
                object.insert("method".into(), method.clone().into());
                if let Some(params) = params {
                    object.insert("params".into(), params.clone());
                }
            }
            Message::Notification { method, params } => {
                object.insert("method".into(), method.clone().into());
                if let Some(params) = params {
                    object.insert("params".into(), params.clone());
                }
            }
            Message::Response { id, outcome } => {
                object.insert("id".into(), id.clone());
                match outcome {
                    Ok(result) => object.insert("result".into(), result.clone()),
                    Err(error) => object.insert("error".into(), error.clone()),
                };
            }
        }
        Value::Object(object)
    }

    /// An error response.
    pub fn error(id: Id, code: i64, message: &str, data: Option<Value>) -> Message {
        let mut error = json!({"code": code, "message": message});
        if let Some(data) = data {
            error["data"] = data;
        }
        Message::Response {
            id,
            outcome: Err(error),
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

    /// The canonical bytes of this frame (what is forwarded).
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            Incoming::Single(message) => message.to_bytes(),
            Incoming::Batch(messages) => to_json(messages),
        }
    }
}

impl Message {
    /// The canonical bytes of this message alone: the bytes of [`Message::to_value`], written
    /// straight from the message (no copy of its params or result, no intermediate tree).
    pub fn to_bytes(&self) -> Vec<u8> {
        to_json(self)
    }
}

fn to_json<T: serde::Serialize + ?Sized>(value: &T) -> Vec<u8> {
    // Keys are strings and every value is a `serde_json::Value`: this cannot fail.
    serde_json::to_vec(value).expect("a JSON-RPC message always serializes")
}

/// Writes exactly what [`Message::to_value`] serializes to: its members in the sorted order of
/// a `serde_json::Map`, which is how the canonical value has always printed (checked by
/// `direct_bytes_are_the_canonical_value` below).
impl serde::Serialize for Message {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        match self {
            Message::Request { id, method, params } => {
                map.serialize_entry("id", id)?;
                map.serialize_entry("jsonrpc", "2.0")?;
                map.serialize_entry("method", method)?;
                if let Some(params) = params {
                    map.serialize_entry("params", params)?;
                }
            }
            Message::Notification { method, params } => {
                map.serialize_entry("jsonrpc", "2.0")?;
                map.serialize_entry("method", method)?;
                if let Some(params) = params {
                    map.serialize_entry("params", params)?;
                }
            }
            Message::Response { id, outcome } => match outcome {
                Ok(result) => {
                    map.serialize_entry("id", id)?;
                    map.serialize_entry("jsonrpc", "2.0")?;
                    map.serialize_entry("result", result)?;
                }
                Err(error) => {
                    map.serialize_entry("error", error)?;
                    map.serialize_entry("id", id)?;
                    map.serialize_entry("jsonrpc", "2.0")?;
                }
            },
        }
        map.end()
    }
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
        let frames = [
            r#"{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{"name":"echo","arguments":{"z":[1,{"b":2,"a":"\u00e9\n"}]}}}"#,
            r#"{"jsonrpc":"2.0","id":"x","method":"ping"}"#,
            r#"{"method":"notifications/progress","jsonrpc":"2.0","params":[1,2]}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hi"}],"isError":false}}"#,
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
