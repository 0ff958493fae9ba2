//! IAM database authentication: the password of each new connection is a
//! fresh token, a SigV4-presigned `connect` request for the database user,
//! valid 15 minutes
//! (<https://docs.aws.amazon.com/AmazonRDS/latest/UserGuide/UsingWithRDS.IAMDBAuth.Connecting.html>).
//!
//! Signed with `aws-sigv4`, the signer every AWS SDK client of the function
//! already links, so IAM authentication adds no crate to the build (the
//! RDS SDK crate, which has a token generator of its own, would add the
//! whole RDS client).

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    SignableBody, SignableRequest, SignatureLocation, SigningParams, SigningSettings, sign,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;

/// How long a token is valid: the 15 minutes RDS accepts. Only the
/// connection's authentication uses it; an open connection outlives it.
const EXPIRES_IN: Duration = Duration::from_secs(15 * 60);

/// The token that logs `user` in to the database at `host:port` in
/// `region`, signed with `credentials` at `now`.
pub(crate) fn auth_token(
    host: &str,
    port: u16,
    user: &str,
    region: &str,
    credentials: Credentials,
    now: SystemTime,
) -> Result<String, String> {
    let identity = Identity::from(credentials);
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(EXPIRES_IN);
    let params: SigningParams<'_> = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("rds-db")
        .time(now)
        .settings(settings)
        .build()
        .map_err(|e| e.to_string())?
        .into();
    let user: String = form_encode(user);
    let url = format!("https://{host}:{port}/?Action=connect&DBUser={user}");
    let signable = SignableRequest::new("GET", &url, std::iter::empty(), SignableBody::Bytes(&[]))
        .map_err(|e| e.to_string())?;
    let (instructions, _signature) = sign(signable, &params)
        .map_err(|e| e.to_string())?
        .into_parts();
    let mut request = http::Request::builder()
        .uri(&url)
        .body(())
        .map_err(|e| e.to_string())?;
    instructions.apply_to_request_http1x(&mut request);
    let signed = request.uri().to_string();
    Ok(signed
        .strip_prefix("https://")
        .unwrap_or(&signed)
        .to_owned())
}

/// `s` percent-encoded as a query value (RFC 3986 unreserved characters
/// kept), as SigV4's canonical query string encodes it.
fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// 2026-12-04T12:00:00Z.
    fn noon() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_385_600)
    }

    fn params(token: &str) -> (String, BTreeMap<String, String>) {
        let (base, query) = token.split_once("/?").expect("a token is host:port/?query");
        let map = query
            .split('&')
            .map(|kv| {
                let (k, v) = kv.split_once('=').expect("key=value");
                (k.to_owned(), v.to_owned())
            })
            .collect();
        (base.to_owned(), map)
    }

    /// The reference tokens were made by botocore 1.44.8's
    /// `generate_db_auth_token` (the AWS CLI's `aws rds
    /// generate-db-auth-token`) with the same credentials, its clock fixed
    /// at the same instant. The server checks the signature, not the
    /// order of the parameters, so the parameters are compared as a set.
    #[test]
    fn tokens_match_the_aws_cli_for_the_same_credentials_and_time() {
        let cases = [
            (
                "db.example.us-east-1.rds.amazonaws.com",
                "idemq_app",
                "us-east-1",
                None,
                "db.example.us-east-1.rds.amazonaws.com:5432/?Action=connect&DBUser=idemq_app&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDEXAMPLE%2F20261204%2Fus-east-1%2Frds-db%2Faws4_request&X-Amz-Date=20261204T120000Z&X-Amz-Expires=900&X-Amz-SignedHeaders=host&X-Amz-Signature=07455be6ae8e92aa4073502c92519a1146895a8b914d61f7dc7aa86308eefdc8",
            ),
            (
                "proxy.eu.example.com",
                "app user",
                "eu-west-1",
                Some("SESSIONTOKEN/with+chars="),
                "proxy.eu.example.com:5432/?Action=connect&DBUser=app%20user&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDEXAMPLE%2F20261204%2Feu-west-1%2Frds-db%2Faws4_request&X-Amz-Date=20261204T120000Z&X-Amz-Expires=900&X-Amz-SignedHeaders=host&X-Amz-Security-Token=SESSIONTOKEN%2Fwith%2Bchars%3D&X-Amz-Signature=79d398b5eb65d398d2f42fbe08390ae975a25e5479a488b8ccaf83af4a4c615c",
            ),
        ];
        for (host, user, region, session, expected) in cases {
            let credentials = Credentials::new(
                "AKIDEXAMPLE",
                "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                session.map(str::to_owned),
                None,
                "test",
            );
            let token = auth_token(host, 5432, user, region, credentials, noon()).unwrap();
            assert_eq!(params(&token), params(expected), "{token}");
            assert!(!token.starts_with("https://"), "{token}");
        }
    }

    #[test]
    fn another_instant_or_key_signs_differently() {
        let creds = |secret: &str| Credentials::new("AKIDEXAMPLE", secret, None, None, "test");
        let sig = |t: &str| params(t).1["X-Amz-Signature"].clone();
        let base = auth_token("h", 5432, "u", "us-east-1", creds("a"), noon()).unwrap();
        let later = auth_token(
            "h",
            5432,
            "u",
            "us-east-1",
            creds("a"),
            noon() + Duration::from_secs(1),
        )
        .unwrap();
        let other = auth_token("h", 5432, "u", "us-east-1", creds("b"), noon()).unwrap();
        assert_ne!(sig(&base), sig(&later));
        assert_ne!(sig(&base), sig(&other));
    }
}
