//! Just enough HTTP/1.1 for a loopback proxy and a Lambda Runtime API
//! emulator: read one message (head and whole body), write it back out.
//! Bodies are de-chunked and re-sent with a `Content-Length`, so a message
//! can be inspected, counted and forwarded as one buffer.

use std::io;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// One request or response.
#[derive(Debug, Clone, Default)]
pub struct Message {
    /// `GET /path HTTP/1.1` or `HTTP/1.1 200 OK`.
    pub start: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Message {
    pub fn request(method: &str, path: &str) -> Self {
        Self {
            start: format!("{method} {path} HTTP/1.1"),
            ..Self::default()
        }
    }

    pub fn response(status: u16, reason: &str) -> Self {
        Self {
            start: format!("HTTP/1.1 {status} {reason}"),
            ..Self::default()
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.set_header(name, value);
        self
    }

    pub fn set_header(&mut self, name: &str, value: impl Into<String>) {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name.to_owned(), value.into()));
    }

    pub fn with_body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// The method and path of a request.
    pub fn target(&self) -> (&str, &str) {
        let mut parts = self.start.split(' ');
        (parts.next().unwrap_or(""), parts.next().unwrap_or(""))
    }

    /// The status of a response (0 when unparseable).
    pub fn status(&self) -> u16 {
        self.start
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    /// Whether the peer asked to close the connection after this message.
    pub fn closes(&self) -> bool {
        self.header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
            || self.start.ends_with("HTTP/1.0")
    }

    /// Reads one message; `None` on a clean end of stream before it starts.
    pub async fn read<R: AsyncBufRead + Unpin>(
        r: &mut R,
        response: bool,
    ) -> io::Result<Option<Self>> {
        let mut start = String::new();
        loop {
            start.clear();
            if r.read_line(&mut start).await? == 0 {
                return Ok(None);
            }
            // Tolerate stray CRLFs between messages.
            if !start.trim().is_empty() {
                break;
            }
        }
        let mut msg = Self {
            start: start.trim_end().to_owned(),
            ..Self::default()
        };
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((n, v)) = line.split_once(':') {
                msg.headers.push((n.trim().to_owned(), v.trim().to_owned()));
            }
        }
        let status = msg.status();
        let bodiless = response && (status / 100 == 1 || status == 204 || status == 304);
        let chunked = msg
            .header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
        if bodiless {
        } else if chunked {
            msg.body = read_chunks(r).await?;
            msg.headers
                .retain(|(n, _)| !n.eq_ignore_ascii_case("transfer-encoding"));
        } else if let Some(len) = msg
            .header("content-length")
            .and_then(|v| v.parse::<usize>().ok())
        {
            let mut body = vec![0; len];
            r.read_exact(&mut body).await?;
            msg.body = body;
        } else if response {
            // Neither length nor chunks: the body runs to the end of the stream.
            r.read_to_end(&mut msg.body).await?;
            msg.set_header("connection", "close");
        }
        if !bodiless {
            let len = msg.body.len().to_string();
            msg.set_header("content-length", len);
        }
        Ok(Some(msg))
    }

    pub async fn write<W: AsyncWrite + Unpin>(&self, w: &mut W) -> io::Result<()> {
        let mut out = Vec::with_capacity(256 + self.body.len());
        out.extend_from_slice(self.start.as_bytes());
        out.extend_from_slice(b"\r\n");
        for (n, v) in &self.headers {
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(v.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        if self.header("content-length").is_none() && !self.start.starts_with("GET ") {
            out.extend_from_slice(format!("content-length: {}\r\n", self.body.len()).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
        w.write_all(&out).await?;
        w.flush().await
    }
}

async fn read_chunks<R: AsyncBufRead + Unpin>(r: &mut R) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let size = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size, 16)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        if size == 0 {
            // Trailers, up to the empty line.
            loop {
                let mut trailer = String::new();
                if r.read_line(&mut trailer).await? == 0 || trailer.trim().is_empty() {
                    return Ok(body);
                }
            }
        }
        let start = body.len();
        body.resize(start + size, 0);
        r.read_exact(&mut body[start..]).await?;
        let mut crlf = [0u8; 2];
        r.read_exact(&mut crlf).await?;
    }
}
