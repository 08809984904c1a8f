//! openraft's network over TCP: one connection per peer, kept open and re-opened after any
//! error; a request is `raft-KIND JSON\n`, the answer one line of JSON (openraft's `Result`).
use std::io;
use std::time::Duration;

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::TypeConfig;

type NodeId = u64;

/// Makes a [`Peer`] for each node openraft talks to.
pub struct Network;

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        Peer { target, addr: node.addr.clone(), conn: None }
    }
}

/// The connection to one peer.
pub struct Peer {
    target: NodeId,
    addr: String,
    conn: Option<BufReader<TcpStream>>,
}

/// Connects within this long, or the peer is unreachable for this call.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

impl Peer {
    async fn exchange(&mut self, kind: &str, body: String) -> io::Result<String> {
        if self.conn.is_none() {
            let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&self.addr))
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
            stream.set_nodelay(true)?;
            self.conn = Some(BufReader::new(stream));
        }
        let conn = self.conn.as_mut().expect("connected above");
        conn.get_mut().write_all(format!("raft-{kind} {body}\n").as_bytes()).await?;
        let mut line = String::new();
        if conn.read_line(&mut line).await? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed the connection"));
        }
        Ok(line)
    }

    /// One RPC: `Err` is a transport failure (the connection is dropped) or a bad answer.
    async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &mut self,
        kind: &str,
        req: &Req,
        ttl: Duration,
    ) -> Result<Resp, io::Error> {
        let body = serde_json::to_string(req).map_err(io::Error::other)?;
        let res = match tokio::time::timeout(ttl, self.exchange(kind, body)).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "no answer in time")),
        };
        match res {
            Ok(line) => serde_json::from_str(&line).map_err(io::Error::other),
            Err(e) => {
                self.conn = None;
                Err(e)
            }
        }
    }

    /// The RPC's outcome as openraft wants it (its error type is openraft's, large as it is).
    #[allow(clippy::result_large_err)]
    fn unwrap<T, E>(&self, r: io::Result<Result<T, E>>) -> Result<T, RPCError<NodeId, BasicNode, E>>
    where
        E: std::error::Error,
    {
        match r {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            Err(e) if e.kind() == io::ErrorKind::InvalidData || e.kind() == io::ErrorKind::Other => {
                Err(RPCError::Network(NetworkError::new(&e)))
            }
            Err(e) => Err(RPCError::Unreachable(Unreachable::new(&e))),
        }
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let r = self
            .call::<_, Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>>("append", &rpc, option.hard_ttl())
            .await;
        self.unwrap(r)
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>>
    {
        let r = self
            .call::<_, Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>>(
                "snapshot",
                &rpc,
                option.hard_ttl(),
            )
            .await;
        self.unwrap(r)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let r = self.call::<_, Result<VoteResponse<NodeId>, RaftError<NodeId>>>("vote", &rpc, option.hard_ttl()).await;
        self.unwrap(r)
    }
}
