//! TLS to PostgreSQL through rustls, with the aws-lc-rs provider the AWS
//! SDK already builds (no second crypto library in the function).
//!
//! The server's certificate is verified against the system's roots
//! (`/etc/pki` on Lambda's `provided.al2023`) plus the PEM bundle named by
//! `IDEMQ_POSTGRES_CA_FILE`: RDS and Aurora certificates chain to Amazon
//! RDS's own CAs, which are in no system store
//! (<https://docs.aws.amazon.com/AmazonRDS/latest/UserGuide/UsingWithRDS.SSL.html>,
//! the "global bundle"). The host name is checked as `sslmode=verify-full`
//! checks it. Whether TLS is used at all is the connection string's
//! `sslmode` (`disable`, `prefer`, `require`), as tokio-postgres reads it.
//!
//! SCRAM authentication runs without channel binding (SCRAM-SHA-256, not
//! its `-PLUS` variant); the certificate check above is what ties the
//! session to the server.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;

use rustls::ClientConfig;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls_pki_types::pem::PemObject;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream as RustlsStream;

/// Makes a TLS connector per connection, for the host connected to.
#[derive(Clone)]
pub(crate) struct Tls {
    config: Arc<ClientConfig>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

impl Tls {
    /// Trusts the system's roots and the certificates of the PEM file
    /// `ca_file`, if given. Fails when neither gives a root, or the file
    /// cannot be read or holds no certificate.
    pub(crate) fn new(ca_file: Option<&str>) -> Result<Self, String> {
        let mut roots = rustls::RootCertStore::empty();
        let system = rustls_native_certs::load_native_certs();
        let (_added, _ignored) = roots.add_parsable_certificates(system.certs);
        if let Some(path) = ca_file {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .and_then(|it| it.collect::<Result<_, _>>())
                .map_err(|e| format!("IDEMQ_POSTGRES_CA_FILE {path}: {e}"))?;
            if certs.is_empty() {
                return Err(format!(
                    "IDEMQ_POSTGRES_CA_FILE {path} holds no PEM certificate"
                ));
            }
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| format!("IDEMQ_POSTGRES_CA_FILE {path}: {e}"))?;
            }
        }
        if roots.is_empty() {
            return Err(
                "no trusted root certificate: the system has none, and IDEMQ_POSTGRES_CA_FILE is not set"
                    .into(),
            );
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Self {
            config: Arc::new(config),
        })
    }
}

impl<S> MakeTlsConnect<S> for Tls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type TlsConnect = Connect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> io::Result<Connect> {
        let name = ServerName::try_from(domain.to_owned())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(Connect {
            connector: TlsConnector::from(Arc::clone(&self.config)),
            name,
        })
    }
}

/// The TLS handshake of one connection.
pub(crate) struct Connect {
    connector: TlsConnector,
    name: ServerName<'static>,
}

impl<S> TlsConnect<S> for Connect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Stream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let tls = self.connector.connect(self.name, stream).await?;
            Ok(Stream(tls))
        })
    }
}

/// A connection's TLS stream.
pub(crate) struct Stream<S>(RustlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for Stream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}
