//! Reading token usage out of OpenAI-compatible responses, whole or streamed (SSE).
//!
//! Non-streamed bodies carry `usage` at the top level (`prompt_tokens`/`completion_tokens` for
//! chat, completions and embeddings; `input_tokens`/`output_tokens` for responses). Streams carry
//! it in a final chunk when asked (`stream_options.include_usage`), or in the
//! `response.completed` event of the responses API. The scanner sees each chunk as it passes,
//! never holds the stream back, and bounds what it buffers.

use serde_json::Value;

/// Tokens a response reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Input (prompt) tokens.
    pub input: u64,
    /// Output (completion) tokens.
    pub output: u64,
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
                Some(Usage { input, output })
            }
        }
    }

    /// Usage of a whole (non-streamed) response body.
    pub fn from_body(body: &[u8]) -> Option<Usage> {
        let value: Value = serde_json::from_slice(body).ok()?;
        Usage::from_value(value.get("usage")?)
    }
}

/// Upper bound on a pending (unterminated) SSE line kept for scanning.
const MAX_LINE: usize = 1 << 20;

/// Scans a server-sent event stream for usage.
#[derive(Debug, Default)]
pub struct SseScanner {
    pending: Vec<u8>,
    usage: Option<Usage>,
}

impl SseScanner {
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
                output: 3
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
                output: 2
            })
        );
        let mut responses = SseScanner::default();
        responses.feed(b"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":4,\"output_tokens\":6,\"total_tokens\":10}}}\n\n");
        assert_eq!(
            responses.usage(),
            Some(Usage {
                input: 4,
                output: 6
            })
        );
    }
}
