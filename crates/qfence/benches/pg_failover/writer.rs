//! The client under test: one row every 100 ms to whichever server takes writes, as an
//! application with a two-host connection string and `target_session_attrs=read-write` would.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_postgres::{Client, NoTls};
use tokio_util::sync::CancellationToken;

/// One acknowledged write: its id, when it was acknowledged (Unix ms) and by which port.
#[derive(Debug, Clone, Copy)]
pub struct Ack {
    pub id: i64,
    pub at_ms: u64,
    pub port: u16,
}

/// A running writer; `stop` ends it and returns what was acknowledged.
pub struct Writer {
    acks: Arc<Mutex<Vec<Ack>>>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

pub const EVERY: Duration = Duration::from_millis(100);

pub async fn connect(conninfo: &str) -> Option<Client> {
    let (client, conn) = tokio_postgres::connect(conninfo, NoTls).await.ok()?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Some(client)
}

/// Creates the bench's table on the primary.
pub async fn create_table(primary: &str) -> anyhow::Result<()> {
    let c = connect(primary)
        .await
        .ok_or_else(|| anyhow::anyhow!("cannot connect to the primary"))?;
    c.batch_execute("CREATE TABLE IF NOT EXISTS bench(id bigint PRIMARY KEY, at timestamptz)")
        .await?;
    Ok(())
}

impl Writer {
    /// Starts writing through `ports` (both hosts, read-write only).
    pub fn start(ports: [u16; 2]) -> Self {
        let conninfo = format!(
            "host=127.0.0.1,127.0.0.1 port={},{} user=postgres password=postgres dbname=app \
             target_session_attrs=read-write connect_timeout=1",
            ports[0], ports[1]
        );
        let acks = Arc::new(Mutex::new(Vec::new()));
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(conninfo, acks.clone(), stop.clone()));
        Self { acks, stop, task }
    }

    /// What has been acknowledged so far.
    pub fn acks(&self) -> Vec<Ack> {
        self.acks.lock().unwrap().clone()
    }

    pub async fn stop(self) -> Vec<Ack> {
        self.stop.cancel();
        let _ = self.task.await;
        self.acks.lock().unwrap().clone()
    }
}

async fn run(conninfo: String, acks: Arc<Mutex<Vec<Ack>>>, stop: CancellationToken) {
    let mut client: Option<Client> = None;
    let mut id: i64 = 0;
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        if client.as_ref().is_none_or(Client::is_closed) {
            client = tokio::time::timeout(Duration::from_secs(2), connect(&conninfo))
                .await
                .ok()
                .flatten();
        }
        let Some(c) = &client else { continue };
        id += 1;
        let res = tokio::time::timeout(
            Duration::from_secs(2),
            c.query_one(
                "INSERT INTO bench VALUES ($1, now()) RETURNING inet_server_port()",
                &[&id],
            ),
        )
        .await;
        match res {
            Ok(Ok(row)) => {
                let port: i32 = row.get(0);
                acks.lock().unwrap().push(Ack {
                    id,
                    at_ms: crate::now_ms(),
                    port: u16::try_from(port).unwrap_or(0),
                });
            }
            _ => client = None,
        }
    }
}

/// The acknowledged ids missing on the server at `conninfo`.
pub async fn lost(conninfo: &str, acks: &[Ack]) -> anyhow::Result<usize> {
    let c = connect(conninfo)
        .await
        .ok_or_else(|| anyhow::anyhow!("cannot connect to the new primary"))?;
    let rows = c.query("SELECT id FROM bench", &[]).await?;
    let have: std::collections::BTreeSet<i64> = rows.iter().map(|r| r.get(0)).collect();
    Ok(acks.iter().filter(|a| !have.contains(&a.id)).count())
}
