//! `toolgate-operator [--context NAME]`: runs the toolgate controllers against the cluster of the
//! current kubeconfig (or the in-cluster service account).
#![forbid(unsafe_code)]

use std::process::ExitCode;

use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use toolgate_crds::ToolDescriptor;

mod build;
mod descriptor;
mod grant;

async fn client(context: Option<String>) -> anyhow::Result<Client> {
    let config = match context {
        Some(context) => {
            let kubeconfig = Kubeconfig::read()?;
            Config::from_custom_kubeconfig(
                kubeconfig,
                &KubeConfigOptions {
                    context: Some(context),
                    ..Default::default()
                },
            )
            .await?
        }
        None => Config::infer().await?,
    };
    Ok(Client::try_from(config)?)
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let mut args = std::env::args().skip(1);
    let mut context = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--context" => context = args.next(),
            other => {
                eprintln!(
                    "toolgate-operator: unknown argument {other:?}; usage: toolgate-operator [--context NAME]"
                );
                return ExitCode::from(2);
            }
        }
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("toolgate-operator: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async move {
        let client = match client(context).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("toolgate-operator: cannot configure the Kubernetes client: {e:#}");
                return ExitCode::from(1);
            }
        };
        // The operator never installs CRDs (Helm does); it says what is missing.
        if let Err(e) = Api::<ToolDescriptor>::all(client.clone()).list(&ListParams::default().limit(1)).await {
            eprintln!("toolgate-operator: cannot list ToolDescriptors ({e}); are the CRDs installed? kubectl apply -f crds/generated/");
            return ExitCode::from(1);
        }
        tracing::info!("toolgate-operator started");
        tokio::join!(descriptor::run(client.clone()), grant::run(client));
        ExitCode::SUCCESS
    })
}
