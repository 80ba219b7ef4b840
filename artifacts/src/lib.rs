//! Artifact stores: an S3-compatible bucket or a local directory, behind `object_store`. The
//! executor writes a call's full output here; the operator's agent API reads it back, so both
//! link this crate and neither the other.

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use toolgate_contract::exec::ArtifactTarget;

/// The store could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("artifact store {target}: {source}")]
pub struct StoreError {
    /// Which store.
    pub target: String,
    /// Why.
    #[source]
    pub source: object_store::Error,
}

/// An opened store and how its objects are addressed.
#[derive(Debug, Clone)]
pub struct ArtifactStore {
    /// The store.
    pub store: Arc<dyn ObjectStore>,
    /// URI prefix of its objects (`s3://bucket`, `file:///var/lib/toolgate/artifacts`).
    pub uri_prefix: String,
    /// Whether objects carry attributes such as Content-Type (a local directory does not).
    pub attributes: bool,
}

impl ArtifactStore {
    /// Open the store a spec names. S3 credentials come from the environment only.
    pub fn open(target: &ArtifactTarget) -> Result<Self, StoreError> {
        match target {
            ArtifactTarget::Local { dir } => {
                std::fs::create_dir_all(dir).map_err(|e| StoreError {
                    target: dir.clone(),
                    source: object_store::Error::Generic {
                        store: "local",
                        source: Box::new(e),
                    },
                })?;
                let store = LocalFileSystem::new_with_prefix(dir).map_err(|source| StoreError {
                    target: dir.clone(),
                    source,
                })?;
                let abs = std::fs::canonicalize(dir)
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| dir.clone());
                Ok(ArtifactStore {
                    store: Arc::new(store),
                    uri_prefix: format!("file://{abs}"),
                    attributes: false,
                })
            }
            ArtifactTarget::S3 {
                bucket,
                endpoint,
                region,
                allow_http,
            } => {
                let mut b = AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .with_region(region)
                    .with_allow_http(*allow_http);
                if let Some(e) = endpoint {
                    b = b.with_endpoint(e).with_virtual_hosted_style_request(false);
                }
                let store = b.build().map_err(|source| StoreError {
                    target: format!("s3://{bucket}"),
                    source,
                })?;
                Ok(ArtifactStore {
                    store: Arc::new(store),
                    uri_prefix: format!("s3://{bucket}"),
                    attributes: true,
                })
            }
        }
    }
}

/// An artifact could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The artifact's URI is not in this store.
    #[error("artifact {uri} is not in this store ({prefix})")]
    ElsewhereUri {
        /// The URI.
        uri: String,
        /// This store's prefix.
        prefix: String,
    },
    /// The store has no such object.
    #[error("artifact {uri} is gone from the store")]
    Missing {
        /// The URI.
        uri: String,
    },
    /// The store failed.
    #[error("reading artifact {uri}: {source}")]
    Store {
        /// The URI.
        uri: String,
        /// Why.
        #[source]
        source: object_store::Error,
    },
}

impl ArtifactStore {
    /// The whole content of an artifact by its recorded URI.
    pub async fn read(&self, uri: &str) -> Result<bytes::Bytes, ReadError> {
        use object_store::ObjectStoreExt;
        let key = uri
            .strip_prefix(&format!("{}/", self.uri_prefix))
            .ok_or_else(|| ReadError::ElsewhereUri {
                uri: uri.into(),
                prefix: self.uri_prefix.clone(),
            })?;
        let stored = match self.store.get(&object_store::path::Path::from(key)).await {
            Ok(s) => s,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(ReadError::Missing { uri: uri.into() });
            }
            Err(source) => {
                return Err(ReadError::Store {
                    uri: uri.into(),
                    source,
                });
            }
        };
        stored.bytes().await.map_err(|source| ReadError::Store {
            uri: uri.into(),
            source,
        })
    }
}
