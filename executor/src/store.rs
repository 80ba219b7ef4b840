//! Artifact stores: an S3-compatible bucket or a local directory, behind `object_store`.

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use toolgate_core::exec::ArtifactTarget;

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
