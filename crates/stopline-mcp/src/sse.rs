//! An incremental server-sent-events splitter for upstream MCP streams.
//!
//! The proxy passes an upstream's SSE response through event by event, as each event completes,
//! never buffering the whole stream: it must see every JSON-RPC message inside (to record
//! outcomes and learn tool annotations) and must be able to stop between two events when a stop
//! lands. Each complete event is handed back with its raw bytes, which are forwarded unchanged,
//! and its joined `data` field, which is parsed for bookkeeping only.

use bytes::{Bytes, BytesMut};

/// The longest event the splitter buffers before it gives up on the stream (a hostile or broken
/// upstream cannot make the proxy hold unbounded memory).
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// One complete event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The event's bytes, blank-line terminator included, exactly as received.
    pub raw: Bytes,
    /// The `data` lines joined with `\n`, when the event has any.
    pub data: Option<String>,
}

/// Splits a byte stream into events.
#[derive(Debug, Default)]
pub struct Splitter {
    buffer: BytesMut,
}

/// The stream sent an event longer than [`MAX_EVENT_BYTES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an SSE event exceeded {MAX_EVENT_BYTES} bytes")]
pub struct EventTooLarge;

/// Where the line starting at `from` ends: (end of its content, start of the next line).
fn line_end(bytes: &[u8], from: usize) -> Option<(usize, usize)> {
    let offset = bytes[from..]
        .iter()
        .position(|&b| b == b'\n' || b == b'\r')?;
    let end = from + offset;
    match bytes[end] {
        b'\r' if end + 1 == bytes.len() => None, // a CR at the end may be half of a CRLF
        b'\r' if bytes[end + 1] == b'\n' => Some((end, end + 2)),
        _ => Some((end, end + 1)),
    }
}

impl Splitter {
    /// Add bytes received from the upstream.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), EventTooLarge> {
        self.buffer.extend_from_slice(chunk);
        if self.buffer.len() > MAX_EVENT_BYTES {
            return Err(EventTooLarge);
        }
        Ok(())
    }

    /// The next complete event, if the buffer holds one.
    pub fn next_event(&mut self) -> Option<Event> {
        let mut start = 0;
        let mut data: Option<String> = None;
        while let Some((end, next)) = line_end(&self.buffer, start) {
            let line = &self.buffer[start..end];
            if line.is_empty() {
                let raw = self.buffer.split_to(next).freeze();
                if raw.iter().all(|&b| b == b'\n' || b == b'\r') {
                    // Stray blank lines between events: drop them and look again.
                    return self.next_event();
                }
                return Some(Event { raw, data });
            }
            let (field, value) = match line.iter().position(|&b| b == b':') {
                Some(colon) => {
                    let value = &line[colon + 1..];
                    (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
                }
                None => (line, &b""[..]),
            };
            if field == b"data" {
                let text = String::from_utf8_lossy(value);
                match &mut data {
                    Some(joined) => {
                        joined.push('\n');
                        joined.push_str(&text);
                    }
                    None => data = Some(text.into_owned()),
                }
            }
            start = next;
        }
        None
    }

    /// Bytes of an unfinished event left when the stream ended.
    pub fn remainder(&self) -> &[u8] {
        &self.buffer
    }
}

/// Encode one JSON-RPC message as an SSE `message` event.
pub fn message_event(json: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(json.len() + 24);
    out.extend_from_slice(b"event: message\ndata: ");
    out.extend_from_slice(json);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&str]) -> Vec<(String, Option<String>)> {
        let mut splitter = Splitter::default();
        let mut events = Vec::new();
        for chunk in chunks {
            splitter.push(chunk.as_bytes()).unwrap();
            while let Some(event) = splitter.next_event() {
                events.push((String::from_utf8(event.raw.to_vec()).unwrap(), event.data));
            }
        }
        events
    }

    #[test]
    fn events_complete_across_chunks_and_line_endings() {
        assert_eq!(
            split(&[
                "event: message\nid: 1\nda",
                "ta: {\"a\":1}\n",
                "\n",
                "data:x\r\ndata: y\r\n\r\n: comment\n\n"
            ]),
            vec![
                (
                    "event: message\nid: 1\ndata: {\"a\":1}\n\n".to_string(),
                    Some("{\"a\":1}".to_string())
                ),
                (
                    "data:x\r\ndata: y\r\n\r\n".to_string(),
                    Some("x\ny".to_string())
                ),
                (": comment\n\n".to_string(), None),
            ]
        );
        assert_eq!(
            split(&["data: a\r", "\n\r\n"]),
            vec![("data: a\r\n\r\n".to_string(), Some("a".to_string()))]
        );
        assert_eq!(
            split(&["datax: a\n\n"]),
            vec![("datax: a\n\n".to_string(), None)]
        );
        assert_eq!(split(&["data: unfinished\n"]), vec![]);
    }
}
