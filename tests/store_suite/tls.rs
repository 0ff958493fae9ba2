//! TLS to PostgreSQL, for real: a test CA and server certificate made with
//! `openssl`, and a proxy that answers PostgreSQL's `SSLRequest`, ends TLS
//! with that certificate and passes the session on to the stack's server.
//! The store must commit through it when it trusts the CA, and refuse the
//! server, as a deployment error, when it does not or when the name does
//! not match.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use idemq::store::postgres::{Postgres, PostgresConfig};
use idemq::store::{CommitError, CommitOutcome};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::unique;
use crate::subject::{Pg, Subject, TTL, commit_on, conninfo_via, upstream};

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (Debian's openssl package) makes the test certificates");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`<name>-ca.pem`) and a server certificate it signed for
/// `localhost` only (`<name>.pem`, `<name>.key`), in a fresh directory.
fn certificates(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique("idemq-tls"));
    std::fs::create_dir_all(&dir).unwrap();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let ca = format!("{name}-ca");
    openssl(
        &dir,
        &[
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.pem"),
                "-days",
                "2",
                "-subj",
                "/CN=idemq test CA",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        ]
        .concat(),
    );
    openssl(
        &dir,
        &[
            &["req"][..],
            &ec,
            &[
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                "/CN=localhost",
            ],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        &dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    );
    dir
}

/// A proxy that speaks TLS to clients with `cert`/`key` and plain
/// PostgreSQL to `upstream`.
async fn tls_terminating_proxy(upstream: String, cert: &Path, key: &Path) -> u16 {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (mut client, _) = listener.accept().await.unwrap();
            let acceptor = acceptor.clone();
            let upstream = upstream.clone();
            tokio::spawn(async move {
                // SSLRequest: length 8, code 80877103.
                let mut request = [0u8; 8];
                if client.read_exact(&mut request).await.is_err() {
                    return;
                }
                assert_eq!(
                    request,
                    [0, 0, 0, 8, 4, 210, 22, 47],
                    "the client asks for TLS first"
                );
                client.write_all(b"S").await.unwrap();
                let Ok(mut tls) = acceptor.accept(client).await else {
                    return; // the client refused the certificate
                };
                let mut server = TcpStream::connect(&upstream).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut server).await;
            });
        }
    });
    port
}

async fn commit_through(
    t: &Pg,
    port: u16,
    host: &str,
    ca: &Path,
    id: &str,
) -> Result<CommitOutcome, CommitError> {
    let store = Postgres::new(
        PostgresConfig::new(conninfo_via(host, port, "require"))
            .with_schema(t.schema())
            .unwrap()
            .with_marker_ttl(TTL)
            .with_ca_file(ca.to_str().unwrap()),
    )
    .unwrap();
    commit_on(&store, id, &t.add_one(id)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_verifies_the_server_certificate_and_its_name() {
    let t = Pg::new().await;
    let dir = certificates("server");
    let other = certificates("other");
    let port =
        tls_terminating_proxy(upstream(), &dir.join("server.pem"), &dir.join("server.key")).await;

    let trusted = commit_through(&t, port, "localhost", &dir.join("server-ca.pem"), "tls-ok").await;
    assert_eq!(trusted.unwrap(), CommitOutcome::Committed);
    assert_eq!(t.counter("tls-ok").await, 1, "committed through TLS");

    let untrusted =
        commit_through(&t, port, "localhost", &other.join("other-ca.pem"), "tls-ca").await;
    assert!(
        matches!(&untrusted, Err(CommitError::AccessDenied { message, .. }) if message.contains("certificate")),
        "another CA's server is refused as a deployment error: {untrusted:?}"
    );
    let misnamed = commit_through(
        &t,
        port,
        "db.example.com",
        &dir.join("server-ca.pem"),
        "tls-name",
    )
    .await;
    assert!(
        matches!(&misnamed, Err(CommitError::AccessDenied { message, .. }) if message.contains("certificate")),
        "a certificate for another name is refused: {misnamed:?}"
    );
    assert_eq!(t.counter("tls-ca").await + t.counter("tls-name").await, 0);
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(other);
}
