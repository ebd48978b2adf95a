//! Reading token usage out of model responses, whole or streamed (SSE), in the two vocabularies
//! the gateway proxies.
//!
//! OpenAI-compatible bodies carry `usage` at the top level (`prompt_tokens`/`completion_tokens`
//! for chat, completions and embeddings; `input_tokens`/`output_tokens` for responses). Their
//! streams carry it in a final chunk when asked (`stream_options.include_usage`), or in the
//! `response.completed` event of the responses API.
//!
//! Anthropic Messages bodies carry `usage` with `input_tokens`, `output_tokens`,
//! `cache_creation_input_tokens` and `cache_read_input_tokens`. Their streams report it in
//! pieces: `message_start` carries `message.usage` (input and cache counts, a first output
//! count), each `message_delta` carries a `usage` whose counts are cumulative, so a field seen
//! later replaces the one seen earlier and a field never repeated keeps its first value.
//!
//! The scanner sees each chunk as it passes, never holds the stream back, and bounds what it
//! buffers.

use serde_json::Value;

/// Tokens a response reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Input (prompt) tokens.
    pub input: u64,
    /// Output (completion) tokens.
    pub output: u64,
    /// Input tokens read from a prompt cache (Anthropic `cache_read_input_tokens`).
    pub cache_read: u64,
    /// Input tokens written to a prompt cache (Anthropic `cache_creation_input_tokens`).
    pub cache_write: u64,
}

/// Which API's vocabulary a response speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Vocabulary {
    /// OpenAI-compatible (`/v1/chat/completions`, `/v1/responses`, …).
    #[default]
    OpenAi,
    /// The Anthropic Messages API (`/v1/messages`).
    Anthropic,
}

impl Usage {
    /// Read a `usage` object (either vocabulary).
    pub fn from_value(usage: &Value) -> Option<Usage> {
        let field = |names: &[&str]| {
            names
                .iter()
                .find_map(|n| usage.get(*n).and_then(Value::as_u64))
        };
        let input = field(&["prompt_tokens", "input_tokens"]);
        let output = field(&["completion_tokens", "output_tokens"]);
        let total = field(&["total_tokens"]);
        match (input, output, total) {
            (None, None, None) => None,
            (input, output, total) => {
                let input = input.unwrap_or(0);
                let output = output.unwrap_or_else(|| total.unwrap_or(0).saturating_sub(input));
                Some(Usage {
                    input,
                    output,
                    ..Usage::default()
                })
            }
        }
    }

    /// Fold an Anthropic `usage` object into `self`: every count it carries replaces the one
    /// held (stream counts are cumulative); a count it lacks is kept. `None` when it carries none.
    pub fn merge_anthropic(previous: Option<Usage>, usage: &Value) -> Option<Usage> {
        let field = |name: &str| usage.get(name).and_then(Value::as_u64);
        let fields = [
            field("input_tokens"),
            field("output_tokens"),
            field("cache_read_input_tokens"),
            field("cache_creation_input_tokens"),
        ];
        if fields.iter().all(Option::is_none) {
            return previous;
        }
        let mut merged = previous.unwrap_or_default();
        let [input, output, cache_read, cache_write] = fields;
        merged.input = input.unwrap_or(merged.input);
        merged.output = output.unwrap_or(merged.output);
        merged.cache_read = cache_read.unwrap_or(merged.cache_read);
        merged.cache_write = cache_write.unwrap_or(merged.cache_write);
        Some(merged)
    }

    /// Every token counted, input of each kind and output.
    pub fn total(&self) -> u64 {
        self.input + self.output + self.cache_read + self.cache_write
    }

    /// Usage of a whole (non-streamed) response body in `vocabulary`.
    pub fn from_body_in(body: &[u8], vocabulary: Vocabulary) -> Option<Usage> {
        match vocabulary {
            Vocabulary::OpenAi => Usage::from_body(body),
            Vocabulary::Anthropic => {
                let value: Value = serde_json::from_slice(body).ok()?;
                Usage::merge_anthropic(None, value.get("usage")?)
            }
        }
    }

    /// Usage of a whole (non-streamed) response body.
    pub fn from_body(body: &[u8]) -> Option<Usage> {
        let value: Value = serde_json::from_slice(body).ok()?;
        Usage::from_value(value.get("usage")?)
    }
}

/// The Responses API response an answer is about: its id and status (`queued`, `in_progress`,
/// `completed`, `failed`, `cancelled`, `incomplete`), from a whole body or a stream's events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseSeen {
    /// `resp_…`.
    pub id: String,
    /// Its status, when it says.
    pub status: Option<String>,
}

impl ResponseSeen {
    /// The response object `value` is (a whole body), or carries (a stream event's `response`).
    pub fn from_value(value: &Value) -> Option<ResponseSeen> {
        let object = match value.get("response") {
            Some(response) if response.is_object() => response,
            _ => value,
        };
        if object.get("object").and_then(Value::as_str) != Some("response") {
            return None;
        }
        Some(ResponseSeen {
            id: object.get("id")?.as_str()?.to_string(),
            status: object
                .get("status")
                .and_then(Value::as_str)
                .map(String::from),
        })
    }

    /// The response a whole body is.
    pub fn from_body(body: &[u8]) -> Option<ResponseSeen> {
        ResponseSeen::from_value(&serde_json::from_slice(body).ok()?)
    }

    /// True when its status is final: the provider works on it no more.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self.status.as_deref(),
            Some("completed" | "failed" | "cancelled" | "incomplete")
        )
    }
}

/// Upper bound on a pending (unterminated) SSE line kept for scanning.
const MAX_LINE: usize = 1 << 20;

/// Scans a server-sent event stream for usage.
#[derive(Debug, Default)]
pub struct SseScanner {
    pending: Vec<u8>,
    usage: Option<Usage>,
    vocabulary: Vocabulary,
    response: Option<ResponseSeen>,
}

impl SseScanner {
    /// A scanner for streams in `vocabulary`.
    pub fn new(vocabulary: Vocabulary) -> SseScanner {
        SseScanner {
            vocabulary,
            ..SseScanner::default()
        }
    }

    /// Feed one chunk as it passes through.
    pub fn feed(&mut self, chunk: &[u8]) {
        for &byte in chunk {
            if byte == b'\n' {
                let line = std::mem::take(&mut self.pending);
                self.line(&line);
            } else if self.pending.len() < MAX_LINE {
                self.pending.push(byte);
            }
        }
    }

    fn line(&mut self, line: &[u8]) {
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        let data = data.trim_ascii();
        if data.is_empty() || data == b"[DONE]" {
            return;
        }
        let Ok(event) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        if self.vocabulary == Vocabulary::Anthropic {
            // `message_start` nests it in the message; `message_delta` carries it at the top.
            let usage = event
                .get("message")
                .and_then(|m| m.get("usage"))
                .or_else(|| event.get("usage"))
                .filter(|u| u.is_object());
            if let Some(usage) = usage {
                self.usage = Usage::merge_anthropic(self.usage, usage);
            }
            return;
        }
        if let Some(seen) = ResponseSeen::from_value(&event) {
            self.response = Some(seen);
        }
        let usage = event.get("usage").filter(|u| !u.is_null()).or_else(|| {
            event
                .get("response")
                .and_then(|r| r.get("usage"))
                .filter(|u| !u.is_null())
        });
        if let Some(usage) = usage.and_then(Usage::from_value) {
            self.usage = Some(usage);
        }
    }

    /// The usage seen so far (the last reported).
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// The Responses API response the stream's events were about, as last reported.
    pub fn response(&self) -> Option<ResponseSeen> {
        self.response.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_found_whole_and_streamed_across_chunk_boundaries() {
        let body = br#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}"#;
        assert_eq!(
            Usage::from_body(body),
            Some(Usage {
                input: 7,
                output: 3,
                ..Usage::default()
            })
        );
        let mut scanner = SseScanner::default();
        let stream = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n";
        for chunk in stream.as_bytes().chunks(7) {
            scanner.feed(chunk);
        }
        assert_eq!(
            scanner.usage(),
            Some(Usage {
                input: 5,
                output: 2,
                ..Usage::default()
            })
        );
        let mut responses = SseScanner::default();
        responses.feed(b"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":4,\"output_tokens\":6,\"total_tokens\":10}}}\n\n");
        assert_eq!(
            responses.usage(),
            Some(Usage {
                input: 4,
                output: 6,
                ..Usage::default()
            })
        );
        responses.feed(b"data: {\"type\":\"response.created\",\"response\":{\"object\":\"response\",\"id\":\"resp_9\",\"status\":\"queued\"}}\n\n");
        let seen = responses.response().unwrap();
        assert_eq!((seen.id.as_str(), seen.is_terminal()), ("resp_9", false));
    }

    #[test]
    fn anthropic_usage_is_folded_from_message_start_and_message_delta() {
        let expected = Usage {
            input: 100,
            output: 10,
            cache_read: 30,
            cache_write: 20,
        };
        let body = br#"{"type":"message","content":[],"usage":{"input_tokens":100,"output_tokens":10,"cache_creation_input_tokens":20,"cache_read_input_tokens":30}}"#;
        assert_eq!(
            Usage::from_body_in(body, Vocabulary::Anthropic),
            Some(expected)
        );
        let stream = concat!(
            "event: message_start\n",
            "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":100,\"output_tokens\":1,\"cache_creation_input_tokens\":20,\"cache_read_input_tokens\":30}}}\n\n",
            "event: ping\ndata: {\"type\":\"ping\"}\n\n",
            "event: content_block_delta\n",
            "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n",
            "event: message_delta\n",
            "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":10}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        let mut scanner = SseScanner::new(Vocabulary::Anthropic);
        for chunk in stream.as_bytes().chunks(5) {
            scanner.feed(chunk);
        }
        assert_eq!(scanner.usage(), Some(expected));
        assert_eq!(expected.total(), 160);
    }
}
