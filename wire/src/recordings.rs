//! Where session recordings live: one object store that every broker writes and every gateway
//! reads, named by a URL (`file:///var/lib/ptyhub/recordings`, a plain directory path, or
//! `s3://bucket/prefix` with the usual `AWS_*` environment variables: `AWS_ENDPOINT`,
//! `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_ALLOW_HTTP`; settings that
//! are not secrets may also come as a query, `s3://bucket/prefix?endpoint=...&allow_http=true`,
//! with `object_store`'s names for them). A session's
//! recording is the object `<session id>.cast` under the store's root.
//!
//! HTTPS goes through rustls with ring, checking the system's roots (reqwest's platform
//! verifier); a plain-HTTP endpoint such as a local S3-compatible server needs
//! `AWS_ALLOW_HTTP=true`.

use std::path::PathBuf;
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::local::LocalFileSystem;
use object_store::path::Path;

/// The object store of recordings, opened from its URL.
#[derive(Debug, Clone)]
pub struct RecordingStore {
    store: Arc<dyn ObjectStore>,
    url: String,
}

/// Why the recordings' store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum RecordingStoreError {
    #[error("recordings store {url:?}: {reason}")]
    Invalid { url: String, reason: String },
}

impl RecordingStore {
    /// Opens `url`: `s3://bucket[/prefix]`, `file:///dir`, or a directory path (created when
    /// missing).
    pub fn open(url: &str) -> Result<Self, RecordingStoreError> {
        let invalid = |reason: String| RecordingStoreError::Invalid {
            url: url.to_owned(),
            reason,
        };
        let store: Arc<dyn ObjectStore> = if let Some(rest) = url.strip_prefix("s3://") {
            let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
            let (bucket, prefix) = location.split_once('/').unwrap_or((location, ""));
            if bucket.is_empty() {
                return Err(invalid("names no bucket".to_owned()));
            }
            let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
            for pair in query.split('&').filter(|pair| !pair.is_empty()) {
                let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                let key: AmazonS3ConfigKey = name
                    .parse()
                    .map_err(|_| invalid(format!("unknown S3 setting {name:?}")))?;
                if matches!(
                    key,
                    AmazonS3ConfigKey::AccessKeyId
                        | AmazonS3ConfigKey::SecretAccessKey
                        | AmazonS3ConfigKey::Token
                ) {
                    return Err(invalid(format!(
                        "{name} is a secret: set it in the environment, not in the URL"
                    )));
                }
                builder = builder.with_config(key, value);
            }
            install_crypto_provider();
            let s3 = builder
                .build()
                .map_err(|error| invalid(error.to_string()))?;
            let prefix = prefix.trim_matches('/');
            if prefix.is_empty() {
                Arc::new(s3)
            } else {
                Arc::new(object_store::prefix::PrefixStore::new(s3, prefix))
            }
        } else {
            let directory = match url.strip_prefix("file://") {
                Some(path) => PathBuf::from(path),
                None if url.contains("://") => {
                    return Err(invalid("use s3://, file:// or a directory path".to_owned()));
                }
                None => PathBuf::from(url),
            };
            if directory.as_os_str().is_empty() {
                return Err(invalid("names no directory".to_owned()));
            }
            std::fs::create_dir_all(&directory)
                .map_err(|error| invalid(format!("cannot create the directory: {error}")))?;
            let local = LocalFileSystem::new_with_prefix(&directory)
                .map_err(|error| invalid(error.to_string()))?;
            Arc::new(local)
        };
        Ok(Self {
            store,
            url: url.to_owned(),
        })
    }

    /// The store itself, for reads, writes and listings.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The URL it was opened from.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Where the recording of `session_id` is.
    pub fn recording_path(session_id: &str) -> Path {
        Path::from(format!("{session_id}.cast"))
    }

    /// The session id of a recording's object, if `path` is one.
    pub fn session_of(path: &Path) -> Option<&str> {
        let name = path.filename()?;
        name.strip_suffix(".cast")
    }
}

/// object_store builds its reqwest clients itself, with no way to hand them a rustls config,
/// and reqwest (built without a provider of its own) takes the process's default crypto
/// provider: ring, the one everything else here uses, unless the process installed one already.
fn install_crypto_provider() {
    // An error only says that a provider is installed already, which is all this needs.
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_directory_or_a_bucket() {
        let directory = std::env::temp_dir().join(format!("ptyhub-wire-{}", std::process::id()));
        let by_path = RecordingStore::open(directory.to_str().unwrap()).unwrap();
        assert!(directory.is_dir());
        assert_eq!(by_path.url(), directory.to_str().unwrap());
        let by_url = format!("file://{}", directory.display());
        RecordingStore::open(&by_url).unwrap();
        std::fs::remove_dir_all(&directory).unwrap();
        RecordingStore::open("s3://bucket/prefix?endpoint=http://127.0.0.1:9&allow_http=true")
            .unwrap();
        for bad in [
            "s3://",
            "http://example/x",
            "",
            "s3://bucket?colour=blue",
            "s3://bucket?secret_access_key=x",
        ] {
            assert!(RecordingStore::open(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn a_recording_is_named_by_its_session() {
        let path = RecordingStore::recording_path("4b6f");
        assert_eq!(path.as_ref(), "4b6f.cast");
        assert_eq!(RecordingStore::session_of(&path), Some("4b6f"));
        assert_eq!(RecordingStore::session_of(&Path::from("x.txt")), None);
    }
}
