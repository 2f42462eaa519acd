//! The operator and test tooling's client of a node's endpoint.

use std::net::SocketAddr;
use std::time::Duration;

use crate::error::ClusterError;
use crate::forward::CallOutcome;
use crate::state::{Command, Response};
use crate::tls::NodeTls;

use super::{CallRequest, StatusReport};

/// An mTLS client for a node's endpoint, for operator tools and tests.
#[derive(Debug, Clone)]
pub struct AdminClient {
    client: reqwest::Client,
}

impl AdminClient {
    /// A client presenting `tls`'s certificate.
    pub fn new(tls: &NodeTls, timeout: Duration) -> Result<Self, ClusterError> {
        crate::tls::install_crypto_provider();
        Ok(Self {
            client: tls.http_client(timeout)?,
        })
    }

    /// Like [`AdminClient::new`], resolving the given host names to fixed addresses (a harness
    /// outside the nodes' DNS, such as a test driving containers).
    pub fn with_resolve(
        tls: &NodeTls,
        timeout: Duration,
        resolve: &[(String, SocketAddr)],
    ) -> Result<Self, ClusterError> {
        crate::tls::install_crypto_provider();
        let mut builder = tls.http_client_builder(timeout)?;
        for (host, addr) in resolve {
            builder = builder.resolve(host, *addr);
        }
        Ok(Self {
            client: builder
                .build()
                .map_err(|e| ClusterError::Tls(e.to_string()))?,
        })
    }

    async fn send<T: serde::de::DeserializeOwned>(
        &self,
        address: &str,
        req: reqwest::RequestBuilder,
    ) -> Result<T, ClusterError> {
        let peer = |message: String| ClusterError::Peer {
            peer: address.to_owned(),
            message,
        };
        req.send()
            .await
            .map_err(|e| peer(e.to_string()))?
            .json()
            .await
            .map_err(|e| peer(e.to_string()))
    }

    /// `GET /cluster/status` of the node at `address`.
    pub async fn status(&self, address: &str) -> Result<StatusReport, ClusterError> {
        let req = self.client.get(format!("https://{address}/cluster/status"));
        self.send(address, req).await
    }

    /// Proposes a command at the node at `address` (it must be the leader).
    pub async fn write(&self, address: &str, command: &Command) -> Result<Response, ClusterError> {
        let req = self
            .client
            .post(format!("https://{address}/admin/write"))
            .json(command);
        let r: Result<Response, String> = self.send(address, req).await?;
        r.map_err(|message| ClusterError::Peer {
            peer: address.to_owned(),
            message,
        })
    }

    /// Asks the node at `address` (it must be the leader) to make a controller call.
    pub async fn call(
        &self,
        address: &str,
        call: &CallRequest,
    ) -> Result<CallOutcome, ClusterError> {
        let req = self
            .client
            .post(format!("https://{address}/admin/call"))
            .json(call);
        let r: Result<CallOutcome, String> = self.send(address, req).await?;
        r.map_err(|message| ClusterError::Peer {
            peer: address.to_owned(),
            message,
        })
    }
}
